/* A program that never touches CUDA. Under the shim its output must be
 * exactly what it prints without it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    printf("cuInit visible: %s\n", dlsym(RTLD_DEFAULT, "cuInit") ? "yes" : "no");
    printf("nvmlInit_v2 visible: %s\n", dlsym(RTLD_DEFAULT, "nvmlInit_v2") ? "yes" : "no");
    printf("printf found: %s\n", dlsym(RTLD_DEFAULT, "printf") ? "yes" : "no");
    printf("dlsym(NULL name): %s\n", dlsym(RTLD_DEFAULT, "flexgv_no_such_symbol") ? "found" : "none");
    fflush(stdout);
    pid_t p = fork();
    if (p == 0)
        _exit(3);
    int st;
    waitpid(p, &st, 0);
    printf("child exit: %d\n", WEXITSTATUS(st));
    return 4;
}
