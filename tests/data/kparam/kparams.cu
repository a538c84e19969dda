struct Big { double v[5]; };
extern "C" __global__ void axpy(float a, const float *x, float *y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i]; }
extern "C" __global__ void mixed(char c, Big b, short s, double *out) { out[0] = c + b.v[4] + s; }
extern "C" __global__ void none() {}
