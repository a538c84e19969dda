"""Allocate a small tensor on cuda:0 and say what happened: run under a quota
smaller than one CUDA context (flexgv run --mem 256MiB) it shows what a
PyTorch user sees when the context itself does not fit.
    python3 torch_small.py
Prints one summary line; on failure the exception then propagates, so the
usual traceback follows on stderr (exit status 1).
"""
import torch

print(f"torch {torch.__version__}: cuda available {torch.cuda.is_available()}, "
      f"{torch.cuda.device_count()} device(s)", flush=True)
try:
    x = torch.ones(1 << 20, device="cuda:0")  # 4 MiB
    free, total = torch.cuda.mem_get_info(0)
    print(f"allocated 4 MiB on cuda:0, sum {x.sum().item():.0f}; "
          f"mem_get_info: total {total} free {free}", flush=True)
except Exception as e:
    print(f"raised {type(e).__module__}.{type(e).__qualname__}: {e}", flush=True)
    raise
