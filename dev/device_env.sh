# Shell setup the device scripts share; source it from the repository root:
#   source dev/device_env.sh
#   install_wheels .whl_lite .whl    # the first folder holding wheels is installed; the rest are not looked at
# The device machine has no network: carried wheels (diffusers and its pure-Python deps) go into /tmp/site with
# pip's offline, no-deps install, and /tmp/site is put first on PYTHONPATH so they win over the image's copies.

install_wheels() {
  local w
  for w in "$@"; do
    if [ -d "$w" ] && ls "$w"/*.whl > /dev/null 2>&1; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$w"/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
      return
    fi
  done
}
