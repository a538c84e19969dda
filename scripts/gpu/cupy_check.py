"""CuPy: an elementwise expression, a matrix product (cuBLAS), a reduction
and a raw kernel compiled by NVRTC; prints the results' bits."""
import cupy as cp

a = cp.arange(1 << 16, dtype=cp.float32).reshape(256, 256) / 1000
b = cp.sin(a) * 2 + 1
c = a @ b
scale = cp.RawKernel(r'''
extern "C" __global__ void scale(float *x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}''', "scale")
scale(((c.size + 255) // 256,), (256,), (c, cp.float32(0.5), cp.int32(c.size)))
cp.cuda.Device().synchronize()
print("cupy:", float(b.sum()).hex(), float(c.sum()).hex(), float(c.max()).hex())
