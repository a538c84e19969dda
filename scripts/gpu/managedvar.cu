// __managed__ variables through the CUDA runtime: their bytes are the
// module's from the start, the host changes them, a kernel that reaches
// them by their addresses (no parameter names them) reads and writes them,
// and the host reads them after the device's synchronization. Natively and
// remotely the output must be the same.
#include <cstdio>
#include <cuda_runtime.h>

__managed__ int counter = 5;
__managed__ float table[1024];

__global__ void bump(int n)
{
    atomicAdd(&counter, n);
    table[threadIdx.x] += threadIdx.x * 0.5f;
}

int main()
{
    printf("initially: counter %d, table[3] %g\n", counter, table[3]);
    counter += 10;
    table[3] = 100;
    bump<<<1, 1024>>>(2);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        printf("cudaDeviceSynchronize: %s\n", cudaGetErrorString(e));
        return 1;
    }
    printf("after a kernel: counter %d, table[3] %g, table[1023] %g\n", counter, table[3], table[1023]);
    return 0;
}
