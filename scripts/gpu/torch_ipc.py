"""CUDA tensors shared between processes as torch.multiprocessing shares
them (the caching allocator's blocks through cudaIpcGetMemHandle): a
spawned child adds 1 to the parent's tensor in place, and each prints the
sum it sees.
    python3 torch_ipc.py
"""
import torch
import torch.multiprocessing as mp


def child(tensors, sums):
    t = tensors.get()
    t += 1
    torch.cuda.synchronize()
    sums.put(float(t.sum()))
    del t


def main():
    mp.set_start_method("spawn")
    t = torch.arange(4096, dtype=torch.float32, device="cuda")
    tensors, sums = mp.Queue(), mp.Queue()
    p = mp.Process(target=child, args=(tensors, sums))
    p.start()
    tensors.put(t)
    seen = sums.get(timeout=120)
    p.join()
    torch.cuda.synchronize()
    print(f"child saw {seen:.0f}, parent sees {float(t.sum()):.0f}, exit {p.exitcode}")


if __name__ == "__main__":
    main()
