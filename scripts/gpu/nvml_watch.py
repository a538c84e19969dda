"""Samples, from outside any tenant, the device memory that processes really
hold on GPU 0 (NVML per-process usage, summed) every 10 ms while FLAG exists;
prints the peak as JSON.    nvml_watch.py FLAG"""
import json
import os
import sys
import time

import pynvml

pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
flag, peak, samples = sys.argv[1], 0, 0
while os.path.exists(flag):
    total = sum((p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h))
    peak, samples = max(peak, total), samples + 1
    time.sleep(0.01)
print(json.dumps({"peak": peak, "samples": samples}))
