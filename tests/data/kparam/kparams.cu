// Kernels of three parameter layouts, for the cubin reader's tests
// (tests/e2e/remote_kparam_test.go). Built on the H200 machine by nvcc 13.0:
//     nvcc -cubin -arch=sm_90 -o kparams.cubin kparams.cu
//     nvcc -fatbin -arch=sm_90 -o kparams.fatbin kparams.cu
//     nvcc -fatbin -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
//         -Xfatbin -compress-all -o kparams_compressed.fatbin kparams.cu
struct Big { double v[5]; };
extern "C" __global__ void axpy(float a, const float *x, float *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i]; }
extern "C" __global__ void mixed(char c, Big b, short s, double *out) { out[0] = c + b.v[4] + s; }
extern "C" __global__ void none() {}
