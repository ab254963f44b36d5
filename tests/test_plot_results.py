"""scripts/plot_results.py draws the README's figure from the committed result files, and refuses runs that do not
cover the same shapes."""
import json
from pathlib import Path

import pytest

from _support import load_script

ROOT = Path(__file__).resolve().parent.parent
plot_results = load_script(ROOT / "scripts" / "plot_results.py")


def test_default_inputs_exist_and_the_figure_is_written(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.png"
    assert plot_results.main(["--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = capsys.readouterr().out
    assert "Wan 1.3B self" in text and "vidattn/cuDNN 1.213" in text  # the envelope run the README's bullet quotes
    older = tmp_path / "old.png"
    kernel = sorted(str(p) for p in (ROOT / "bench" / "results").glob("kernel_2026-12-01_*williams*.json"))
    assert plot_results.main(["--kernel", *kernel, "--out", str(older)]) == 0
    assert "Wan2.1-1.3B self" in capsys.readouterr().out


def test_run_ratios_are_taken_within_the_one_run():
    run = {"results": [
        {"group": "fp8", "name": "A", "impls": {"cudnn": {"tflops": 500.0}, "vidattn": {"tflops": 600.0},
                                               "fa3": {"tflops": 550.0}, "sage2": {"tflops": 250.0}}},
        {"group": "fp8", "name": "B", "impls": {"cudnn": {"tflops": 400.0}, "vidattn": {"tflops": 600.0}}},
        {"group": "headdims", "name": "C", "impls": {"cudnn": {"tflops": 1.0}, "vidattn": {"tflops": 9.0}}}]}
    kernel, fa3, sage = plot_results.run_ratios(run)
    assert kernel == [("A", "A", 1.2), ("B", "B", 1.5)]
    assert fa3 == {"A": 1.1} and sage == {"A": 0.5}
    run["results"][1]["impls"].pop("cudnn")
    with pytest.raises(SystemExit, match="no cuDNN or vidattn time"):
        plot_results.run_ratios(run)
    with pytest.raises(SystemExit, match="no shape of group"):
        plot_results.run_ratios({"results": []})


def test_kernel_ratio_is_the_median_over_runs(tmp_path):
    runs = []
    for i, r in enumerate([1.1, 1.3, 1.2]):
        p = tmp_path / f"k{i}.json"
        p.write_text(json.dumps({"results": [{"key": "a", "name": "A", "vidattn_over_cudnn": r}]}))
        runs.append(p)
    assert plot_results.kernel_ratios(runs) == [("a", "A", 1.2)]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"results": [{"key": "b", "name": "B", "vidattn_over_cudnn": 1.0}]}))
    with pytest.raises(SystemExit, match="missing"):
        plot_results.kernel_ratios([runs[0], bad])


def test_anchor_ratios_are_taken_within_each_run():
    anchors = json.loads((ROOT / "bench" / "results" / "anchors_fa3_sageattention_h200.json").read_text())
    fa3, sage = plot_results.anchor_ratios(anchors)
    assert fa3["wan13b_self"] == pytest.approx(681 / 569)
    assert sage["wan_cross"] == pytest.approx(294 / 522) and "seed4k" not in sage


def test_families_without_a_kernel_call_show_no_speedup():
    """Allegro (head dim 96) runs SDPA on both paths: the table says so instead of a ratio, the plot leaves it out."""
    cross = json.loads((ROOT / "bench" / "results" / "cross_model_20261130.json").read_text())
    labels = [label for label, _ in plot_results.forward_rows(cross, None)]
    assert not any(label.startswith("Allegro") for label in labels) and any(l.startswith("Mochi") for l in labels)
    table = load_script(ROOT / "scripts" / "cross_model_table.py")
    rows = {r["model_family"]: r for r in cross["rows"]}
    lines = table.table_lines([rows["allegro"], rows["mochi"]])
    assert "n/a (SDPA both)" in lines[2] and "0.992" not in lines[2]
    assert "**1.103×**" in lines[3]


def test_an_all_fallback_e2e_report_is_refused(tmp_path):
    """A CPU or all-fallback e2e report timed SDPA against SDPA: the figure must not draw it as a speedup."""
    e2e = tmp_path / "rep.json"
    e2e.write_text(json.dumps({"metadata": {"git_commit": "abcdef0"}, "device": "cpu", "speedup": None,
                               "fallback": {"all_fallback": True}}))
    with pytest.raises(SystemExit, match="no speedup to plot"):
        plot_results.main(["--e2e", str(e2e), "--out", str(tmp_path / "x.png")])


def test_the_wrong_kind_of_json_is_named(tmp_path):
    wrong = tmp_path / "w.json"
    wrong.write_text(json.dumps({"something": 1}))
    with pytest.raises(SystemExit, match="is not the JSON this panel reads"):
        plot_results.main(["--cross-model", str(wrong), "--out", str(tmp_path / "x.png")])
