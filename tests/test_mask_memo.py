"""The kv_lens memo: a model's one mask per forward is tested (a host sync) once, not once per layer, and a mask
that changes is tested again."""
import pytest
import torch

from vidattn.diffusers import sdpa_common
from vidattn.diffusers.masks import LastMaskMemo, mask_to_kv_lens


def test_memo_hits_for_the_same_mask_and_recomputes_on_change():
    memo = LastMaskMemo()
    mask = torch.ones(2, 5, dtype=torch.bool)
    n = [0]

    def compute():
        n[0] += 1
        return int(mask.sum())
    assert memo.get(mask, ("k",), compute) == 10
    assert memo.get(mask, ("k",), compute) == 10 and n[0] == 1
    mask[1, 3:] = False  # written in place: the version counter moves
    assert memo.get(mask, ("k",), compute) == 8 and n[0] == 2
    assert memo.get(mask, ("other shape",), compute) == 8 and n[0] == 3
    other = mask.clone()  # equal values, another tensor: tested again
    assert memo.get(other, ("other shape",), compute) == 8 and n[0] == 4


def test_memo_keeps_masks_that_alternate_layer_by_layer():
    """LTX-2 hands two text masks (video->text, audio->text) to alternating attentions of every block: each is
    tested once, not once per call; past the memo's size the oldest goes first."""
    memo = LastMaskMemo(size=2)
    a, b, c = (torch.ones(2, 5, dtype=torch.bool) for _ in range(3))
    n = [0]

    def compute():
        n[0] += 1
        return n[0]
    for _ in range(4):
        memo.get(a, ("k",), compute)
        memo.get(b, ("k",), compute)
    assert n[0] == 2
    memo.get(c, ("k",), compute)  # evicts a, the least recently used
    assert n[0] == 3
    memo.get(b, ("k",), compute)
    assert n[0] == 3
    memo.get(a, ("k",), compute)
    assert n[0] == 4


def test_memo_skips_inference_mode_tensors():
    memo = LastMaskMemo()
    with torch.inference_mode():
        mask = torch.ones(3, dtype=torch.bool)
    n = [0]

    def compute():
        n[0] += 1
        return n[0]
    assert memo.get(mask, (), compute) == 1
    assert memo.get(mask, (), compute) == 2


def test_bool_mask_memo_answers_follow_the_mask():
    keep = torch.arange(6)[None, :] < torch.tensor([6, 3])[:, None]
    lens, reason = mask_to_kv_lens(keep, 2, 6)
    assert reason is None and lens.tolist() == [6, 3]
    keep[1] = torch.tensor([True, False, True, False, False, False])  # no longer a prefix
    lens, reason = mask_to_kv_lens(keep, 2, 6)
    assert lens is None and "prefix" in reason


@pytest.fixture
def convert_calls(monkeypatch):
    """One entry per run of the SDPA-mask test (sdpa_common._convert, the part with the host sync)."""
    calls = []
    real = sdpa_common._convert

    def spy(*a):
        calls.append(1)
        return real(*a)
    monkeypatch.setattr(sdpa_common, "_convert", spy)
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_sdpa_mask_memo_keys_on_the_source_tensor(dtype, convert_calls):
    keep = torch.arange(8)[None, :] < torch.tensor([8, 5])[:, None]
    source = keep if dtype == torch.bool else (1 - keep.float()) * -10000.0
    for _ in range(3):  # three layers, each preparing its own (B, H, 1, Skv) copy of the model's mask
        prepared = source[:, None, None, :].expand(2, 4, 1, 8).clone()
        lens, reason = sdpa_common.sdpa_mask_to_kv_lens(prepared, 2, 4, 16, 8, source=source)
        assert reason is None and lens.tolist() == [8, 5]
    assert len(convert_calls) == 1


def test_ltx_forward_tests_its_text_mask_once(convert_calls):
    pytest.importorskip("diffusers")
    import vidattn
    from test_processors_ltx import forward, tiny_inputs, tiny_ltx

    calls = convert_calls
    model = tiny_ltx(64)
    inputs = tiny_inputs()
    expected = forward(model, *inputs)
    vidattn.apply(model)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = forward(model, *inputs)
        assert len(calls) == 1  # two masked cross-attention layers, one test
        out2 = forward(model, *inputs)  # a new forward makes a new mask tensor: tested again
    assert len(calls) == 2
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out2, expected, atol=1e-5, rtol=1e-5)


def test_memo_shared_by_threads_neither_raises_nor_mixes_up_masks():
    """Processors and the backend share module-level memos, and pipelines may run from several threads: lookups and
    updates racing each other must not raise (an entry popped by another thread) or return another mask's result."""
    import threading

    from vidattn.diffusers.masks import LastMaskMemo

    memo = LastMaskMemo(4)
    masks = [torch.zeros(3) + i for i in range(8)]
    errors, wrong = [], []

    def work(seed):
        import random

        r = random.Random(seed)
        try:
            for _ in range(20000):
                i = r.randrange(len(masks))
                got = memo.get(masks[i], (i,), lambda i=i: i)
                if got != i:
                    wrong.append((i, got))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(repr(exc))

    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can: the race shows in a few thousand calls
    try:
        threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert not errors and not wrong, (errors[:3], wrong[:3])
