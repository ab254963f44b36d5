"""scripts/kernel_ab.sh: valid bash, and every patch its default variants name exists in csrc/experiments."""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "kernel_ab.sh"


def test_syntax():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_default_variants_name_existing_patches():
    text = SCRIPT.read_text()
    block = re.search(r'VARIANTS=\$\{VARIANTS:-"(.*?)"\}', text, re.S).group(1)
    patches = {line.split("|")[1] for line in block.split() if line.split("|")[1]}
    assert patches, "expected at least one patched variant"
    for p in patches:
        assert (ROOT / "csrc" / "experiments" / p).is_file(), p
