"""torch.compile(fullgraph=True) through vidattn::attention: no graph breaks, the op stays one node, same output."""
import pytest
import torch

import vidattn
from conftest import is_hopper, tiny_wan, tiny_wan_inputs

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")


class GraphRecorder:
    """A torch.compile backend that keeps the FX graphs Dynamo hands it and runs them eagerly."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def count(self, op) -> int:
        return sum(1 for gm in self.graphs for n in gm.graph.nodes if n.op == "call_function" and n.target == op)


def test_tiny_wan_compiles_fullgraph_with_vidattn():
    torch._dynamo.reset()
    model = tiny_wan()
    inputs = tiny_wan_inputs(batch=2)
    vidattn.apply(model)
    with torch.no_grad():
        expected = model(*inputs).sample
        # fullgraph=True raises on any graph break; the recorder also shows a single graph holding the op
        recorder = GraphRecorder()
        out = torch.compile(model, fullgraph=True, backend=recorder)(*inputs).sample
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
        assert len(recorder.graphs) == 1
        assert recorder.count(torch.ops.vidattn.attention.default) + recorder.count(torch.ops.vidattn.attention) == 4

        torch._dynamo.reset()
        out = torch.compile(model, fullgraph=True, backend="aot_eager")(*inputs).sample
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_attention_compiles_with_dynamic_shapes(layout):
    torch._dynamo.reset()

    def fn(q, k, v, kv_lens):
        out, lse = vidattn.attention(q, k, v, layout=layout, kv_lens=kv_lens, return_lse=True, scale=0.125)
        return out * 2, lse + 1

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager", dynamic=True)
    for b, sq, skv in ((2, 5, 7), (3, 9, 11)):
        shape = lambda s: (b, s, 2, 64) if layout == "bshd" else (b, 2, s, 64)  # noqa: E731
        q, k, v = torch.randn(shape(sq)), torch.randn(shape(skv)), torch.randn(shape(skv))
        kv_lens = torch.randint(1, skv + 1, (b,))
        out, lse = compiled(q, k, v, kv_lens)
        ref_out, ref_lse = fn(q, k, v, kv_lens)
        assert out.shape == q.shape and lse.shape == (b, 2, sq)
        torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(lse, ref_lse, atol=1e-6, rtol=1e-6)


@pytest.mark.gpu
def test_gpu_compile_inductor_bf16():
    torch._dynamo.reset()
    model = tiny_wan().to("cuda", torch.bfloat16)
    x, t, ctx = (a.to("cuda") for a in tiny_wan_inputs(batch=1, frames=5, size=16, text=40))
    x, ctx = x.bfloat16(), ctx.bfloat16()
    with torch.no_grad():
        sdpa = model(x, t, ctx).sample  # diffusers' own processors: PyTorch SDPA, the numerics contract
    vidattn.apply(model)
    with torch.no_grad():
        expected = model(x, t, ctx).sample
        out = torch.compile(model, fullgraph=True)(x, t, ctx).sample
    torch.testing.assert_close(out.float(), expected.float(), atol=5e-2, rtol=5e-2)
    # Compiled vidattn against SDPA itself, not only against eager vidattn (which could share a wrong answer).
    torch.testing.assert_close(out.float(), sdpa.float(), atol=5e-2, rtol=5e-2)
    if is_hopper():
        assert vidattn.kernel_available()
