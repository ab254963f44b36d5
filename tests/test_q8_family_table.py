"""dev/q8_family_table.py: the per-family 8-bit table from device stage P21's folders (made-up reports)."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _support import load_script  # noqa: E402

t = load_script(ROOT / "dev" / "q8_family_table.py", importable=True)


def _write(d: Path, fam: str, e2e=True, fid=True, blind=False):
    if e2e:
        (d / f"e2e_{fam}").mkdir(parents=True)
        (d / f"e2e_{fam}" / "report.json").write_text(json.dumps({
            "height": 480, "width": 832, "frames": 81, "tokens": 32760, "heads": 12, "head_dim": 128,
            "results": {p: {"forward_stats_ms": {"median": ms}} for p, ms in
                        (("sdpa", 600.0), ("vidattn", 500.0), ("vidattn_8bit", 400.0))}}))
    if fid:
        (d / f"fid_{fam}").mkdir(parents=True)
        step = 0.0 if blind else 1e-3
        (d / f"fid_{fam}" / "fidelity.json").write_text(json.dumps({
            "device": "cuda", "height": 480, "width": 832, "frames": 81,
            "per_layer": {"summary": {"8bit": {"self": {"rel_l2_median": 4e-3, "rel_l2_max": 5e-3, "calls": 12,
                                                        "kernel_8bit_calls": 12, "key_padded_calls": 0}},
                                      "sage2": {"self": {"rel_l2_median": 4.5e-3, "rel_l2_max": 6e-3}},
                                      "exact": {"self": {"rel_l2_median": 1.7e-3, "rel_l2_max": 1.8e-3}}}},
            "one_step": [{"exact": {"rel_l2": step}, "8bit": {"rel_l2": 2e-3}, "sage2": {"rel_l2": 3e-3}}],
            "video": {"8bit": {"psnr_db": 49.9}, "sage2": {"psnr_db": 45.7}, "exact": {"psnr_db": "inf"}},
            "suggested_policy": {"policy": "none"}, "sweep": [{"policy": "steps=1"}]}))


def test_table_rows_and_not_measurable(tmp_path):
    _write(tmp_path, "wan")
    _write(tmp_path, "kandinsky5", blind=True)
    _write(tmp_path, "ltx", fid=False)
    out = t.table([tmp_path])
    rows = {line.split("|")[1].strip(): line for line in out.splitlines()[2:]}
    assert "600 / 500 / 400" in rows["wan"] and "1.250x" in rows["wan"] and "12 of 12" in rows["wan"]
    assert "49.90 / 45.70 / inf" in rows["wan"] and "none (all 8-bit)" in rows["wan"]
    assert rows["kandinsky5"].count("not measurable") == 2  # one-step and video, the exact path equal to SDPA's
    assert "1.250x" in rows["ltx"] and rows["ltx"].count("n/a") >= 3


def test_missing_folder_is_refused(tmp_path, capsys):
    assert t.main([str(tmp_path / "nope")]) == 2
    assert "not a folder" in capsys.readouterr().err
