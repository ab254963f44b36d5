"""vidattn.diffusers checks the installed diffusers at import: too old or failing to import is an ImportError that
names the fix (vidattn/diffusers/_requirements.py)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vidattn.diffusers import _requirements as req

REPO = Path(__file__).resolve().parents[1]


def _ok(name):
    return object()


def _broken(name):
    raise AttributeError("module 'torch' has no attribute 'accelerator'")


@pytest.mark.parametrize("version", ["0.42.0", "0.42.1", "0.43.0.dev0", "1.0.0"])
def test_supported_versions_pass(version):
    assert req.check_diffusers(version, "2.11.0", importer=_ok) is None


@pytest.mark.parametrize("version", ["0.41.0", "0.35.2", "0.9.0"])
def test_older_diffusers_is_an_import_error_naming_the_fix(version):
    with pytest.raises(ImportError, match=rf"needs diffusers >= 0\.42; this environment has diffusers {version}\. "
                                          r"Upgrade it: pip install -U 'diffusers>=0\.42'"):
        req.check_diffusers(version, "2.11.0", importer=_ok)


def test_a_diffusers_failing_on_old_torch_names_torch():
    with pytest.raises(ImportError) as info:
        req.check_diffusers("0.42.1", "2.5.1+cu124", importer=_broken)
    msg = str(info.value)
    assert "could not import diffusers 0.42.1 (AttributeError: module 'torch' has no attribute 'accelerator')" in msg
    assert "need torch >= 2.6; this is torch 2.5.1+cu124" in msg
    assert isinstance(info.value.__cause__, AttributeError)


def test_a_diffusers_failing_on_a_recent_torch_gives_its_own_error_only():
    with pytest.raises(ImportError) as info:
        req.check_diffusers("0.42.1", "2.11.0", importer=_broken)
    assert "could not import diffusers 0.42.1" in str(info.value) and "torch >=" not in str(info.value)


def test_no_diffusers_is_not_an_error():
    def absent(name):
        raise AssertionError("not imported when diffusers is not installed")

    orig = req.installed_diffusers
    try:
        req.installed_diffusers = lambda: None
        assert req.check_diffusers(importer=absent) is None
    finally:
        req.installed_diffusers = orig


def test_this_environment_passes():
    pytest.importorskip("diffusers")
    assert req.installed_diffusers() is not None
    assert req.check_diffusers() is None


def _python_with_fake_diffusers(tmp_path, version, body):
    """A child Python whose sys.path starts with a fake diffusers `version` (a package and its dist-info)."""
    pkg = tmp_path / "diffusers"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(f"__version__ = {version!r}\n{body}\n")
    info = tmp_path / f"diffusers-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: diffusers\nVersion: {version}\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]), VIDATTN_LIBRARY="/nonexistent")
    code = textwrap.dedent("""
        import vidattn
        try:
            vidattn.apply
        except ImportError as e:
            print("ImportError:", e)
        else:
            print("imported")
    """)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_import_with_an_old_diffusers_installed(tmp_path):
    """End to end: a diffusers 0.41.0 first on sys.path, then vidattn.apply (which imports vidattn.diffusers)."""
    r = _python_with_fake_diffusers(tmp_path, "0.41.0", "")
    assert r.returncode == 0, r.stderr
    assert "ImportError: vidattn's diffusers integration needs diffusers >= 0.42; this environment has diffusers " \
           "0.41.0" in r.stdout


def test_import_with_a_diffusers_that_fails_to_import(tmp_path):
    r = _python_with_fake_diffusers(tmp_path, "0.42.1", "raise AttributeError('no attribute accelerator')")
    assert r.returncode == 0, r.stderr
    assert "ImportError: vidattn's diffusers integration could not import diffusers 0.42.1 (AttributeError: " \
           "no attribute accelerator)" in r.stdout
