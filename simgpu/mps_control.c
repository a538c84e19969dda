/* The simulated GPU's MPS control daemon, nvidia-cuda-mps-control as far as
 * flexgv uses it: `-d` starts the daemon on $CUDA_MPS_PIPE_DIRECTORY
 * (default /tmp/nvidia-mps), listening on the packet socket `control` as
 * NVIDIA's does (refused when one answers there already); without -d, each
 * line of standard input is a command sent to the daemon and its answer is
 * printed. Commands: quit (the daemon exits) and
 * get_default_active_thread_percentage. The simulated driver confines a
 * process to CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of the SMs while a daemon
 * answers (simgpu/state.c).
 *
 * A CUDA process joins MPS at its initialization with `client`, answered
 * `ok` by the MPS server the daemon stands for. FLEXGV_SIM_MPS_SERVER, as
 * the daemon starts, makes that server broken, for tests: `hang` never
 * answers a client (the daemon still answers its commands), `refuse`
 * answers `refused`. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const char *pipe_dir(void)
{
    const char *d = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return d && *d ? d : "/tmp/nvidia-mps";
}

static int control_addr(struct sockaddr_un *a)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path, sizeof a->sun_path, "%s/control", pipe_dir());
    return n > 0 && (size_t)n < sizeof a->sun_path ? 0 : -1;
}

static int dial(void)
{
    struct sockaddr_un a;
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || control_addr(&a) || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

enum { SERVES, HANGS, REFUSES };

/* Answers cmd on c; 0 when c is to be kept open unanswered (a client of a
 * server that hangs). */
static int answer(int c, const char *cmd, int server)
{
    if (!strcmp(cmd, "client") && server == HANGS)
        return 0;
    const char *out = !strcmp(cmd, "get_default_active_thread_percentage") ? "100.0\n"
                      : !strcmp(cmd, "client")                             ? server == REFUSES ? "refused\n" : "ok\n"
                      : *cmd                                               ? "Unknown command\n"
                                                                           : "";
    if (write(c, out, strlen(out)) < 0) {
        /* the client left */
    }
    return 1;
}

static int daemon_main(void)
{
    const char *broken = getenv("FLEXGV_SIM_MPS_SERVER");
    int server = !broken || !*broken ? SERVES : !strcmp(broken, "hang") ? HANGS : !strcmp(broken, "refuse") ? REFUSES : -1;
    if (server < 0) {
        fprintf(stderr, "nvidia-cuda-mps-control: FLEXGV_SIM_MPS_SERVER=%s: want hang or refuse\n", broken);
        return 2;
    }
    if (mkdir(pipe_dir(), 0755) && errno != EEXIST) {
        fprintf(stderr, "nvidia-cuda-mps-control: cannot create %s: %s\n", pipe_dir(), strerror(errno));
        return 1;
    }
    int probe = dial();
    if (probe >= 0) {
        close(probe);
        fprintf(stderr, "An instance of this daemon is already running\n");
        return 1;
    }
    struct sockaddr_un a;
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (s < 0 || control_addr(&a)) {
        fprintf(stderr, "nvidia-cuda-mps-control: no socket in %s\n", pipe_dir());
        return 1;
    }
    unlink(a.sun_path); /* a dead daemon's */
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 16)) {
        fprintf(stderr, "nvidia-cuda-mps-control: %s: %s\n", a.sun_path, strerror(errno));
        return 1;
    }
    pid_t p = fork();
    if (p < 0)
        return 1;
    if (p > 0)
        return 0; /* as the real one, -d returns once the daemon listens */
    setsid();
    signal(SIGPIPE, SIG_IGN);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0), dup2(null, 1), dup2(null, 2);
        close(null);
    }
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0)
            continue;
        char line[256];
        ssize_t n;
        size_t len = 0;
        while (len < sizeof line - 1 && (n = read(c, line + len, sizeof line - 1 - len)) > 0) {
            len += (size_t)n;
            if (memchr(line, '\n', len))
                break;
        }
        line[len] = 0;
        line[strcspn(line, "\r\n")] = 0;
        if (!strcmp(line, "quit")) {
            unlink(a.sun_path);
            close(c);
            _exit(0);
        }
        if (answer(c, line, server))
            close(c);
    }
}

/* One connection per command, as short as the daemon's answers. */
static int client_main(void)
{
    char line[256];
    int rc = 0;
    while (fgets(line, sizeof line, stdin)) {
        int fd = dial();
        if (fd < 0) {
            fprintf(stderr, "Cannot find MPS control daemon process\n");
            return 1;
        }
        if (write(fd, line, strlen(line)) < 0)
            rc = 1;
        shutdown(fd, SHUT_WR);
        char buf[256];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0)
            fwrite(buf, 1, (size_t)n, stdout);
        close(fd);
    }
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "-d"))
        return daemon_main();
    if (argc == 1)
        return client_main();
    fprintf(stderr, "usage: nvidia-cuda-mps-control [-d]\n");
    return 2;
}
