/* Launches from many threads at once through one resolved pointer.
 *     threads [THREADS] [LAUNCHES_PER_THREAD] */
#include "common.h"

#include <pthread.h>

static struct launch_env env;
static int per_thread;

static void *worker(void *arg)
{
    (void)arg;
    CHECK(env.setcur(env.ctx));
    for (int i = 0; i < per_thread; i++)
        CHECK(env.launch(env.fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    return NULL;
}

int main(int argc, char **argv)
{
    int nthreads = argc > 1 ? atoi(argv[1]) : 16;
    per_thread = argc > 2 ? atoi(argv[2]) : 2000;
    if (nthreads < 1 || nthreads > 256)
        return 2;
    env = open_launch_env("empty");
    pthread_t t[256];
    for (int i = 0; i < nthreads; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    CHECK(env.sync());
    count("cuLaunchKernel", (long)nthreads * per_thread);
    count("cuCtxSetCurrent", nthreads + 1);
    print_expects();
    printf("threads: ok\n");
    return 0;
}
