// Kernels for memprobe.c: a module-wide global and per-thread local arrays
// of known sizes, built to a cubin (nvcc -cubin -arch=sm_90).
#ifndef GLOBAL_BYTES
#define GLOBAL_BYTES (1ull << 30)
#endif
__device__ char big_global[GLOBAL_BYTES];

template <int N> __device__ void use_local(int *out, int seed)
{
    volatile char buf[N];
    for (int i = 0; i < N; i += 97)
        buf[i] = (char)(seed + i);
    *out = buf[(seed & 0x7fffffff) % N];
}

extern "C" __global__ void touch(int *out) { out[0] = big_global[threadIdx.x]; }
extern "C" __global__ void local1k(int *out, int s) { use_local<1024>(out, s); }
extern "C" __global__ void local4k(int *out, int s) { use_local<4096>(out, s); }
extern "C" __global__ void local16k(int *out, int s) { use_local<16384>(out, s); }
extern "C" __global__ void local64k(int *out, int s) { use_local<65536>(out, s); }
extern "C" __global__ void nothing(int s) { (void)s; }
// Kernels that use what the limits reserve (the driver reserves it when a
// kernel that needs it is launched).
extern "C" __global__ void use_printf(int s) { if (s == 12345) printf("%d\n", s); }
extern "C" __global__ void use_malloc(int s)
{
    if (s == 12345) {
        void *p = malloc(16);
        free(p);
    }
}
#ifdef WITH_CDP
__global__ void child(int s) { (void)s; }
extern "C" __global__ void use_launch(int s) { if (s == 12345) child<<<1, 1>>>(s); }
#endif
