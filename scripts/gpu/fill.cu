// The simulated GPU's builtin fill kernel on a real GPU: n words from p get
// v. Built with nvcc -cubin for tests/clients/graphnodes
// (FLEXGV_TEST_FILL_IMAGE), so one program's calls run on both.
extern "C" __global__ void fill(unsigned *p, unsigned v, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] = v;
}
