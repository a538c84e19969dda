"""torch.compile (Inductor, Triton kernels) of a small MLP, compiled afresh:
prints the bits of one output row. Row-wise only (no reduction across
blocks, whose order may vary), so that runs are identical on one GPU."""
import os
import tempfile

os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
import torch  # noqa: E402

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64)).cuda()
x = torch.randn(128, 256, device="cuda")
f = torch.compile(lambda t: torch.softmax(model(t), dim=-1).square())
out = f(x)
out = f(x + 1)
torch.cuda.synchronize()
print("torch.compile:", [float(v).hex() for v in out[3, :8].tolist()])
