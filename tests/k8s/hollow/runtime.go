package hollow

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

// Runtime is a container runtime (CRI) for a hollow kubelet: the CRI's
// fake (k8s.io/cri-client's RemoteRuntime), which keeps the sandboxes'
// and containers' states, but for containers, which run for real here:
// the container's command, a program of the node's image folder, runs
// with the environment, mounts and user the kubelet gave, until it exits
// or the kubelet stops it.
type Runtime struct {
	*fakeremote.RemoteRuntime
	env     []string // the node's own, before the container's
	image   string
	scratch string
	srv     *grpc.Server
	// CDISpecDirs are where the runtime reads CDI specs, as containerd's
	// cdi_spec_dirs: a container's CDI devices are resolved there, by the
	// CDI project's own library (what containerd and CRI-O use), into the
	// spec's edits. None: CDI is off, and a container given CDI devices
	// is refused.
	CDISpecDirs []string

	mu         sync.Mutex
	containers map[string]*Container // by id
	created    int
}

// Container is what the kubelet asked of the runtime for one container,
// and how it ran.
type Container struct {
	Namespace, Pod string
	// Config is the kubelet's CreateContainer request: env, mounts,
	// devices, CDI devices, user.
	Config *runtimeapi.ContainerConfig

	seq   int    // of creation
	log   string // the CRI log file
	stdin io.WriteCloser
	cmd   *exec.Cmd
	out   printed
	done  chan struct{}
}

// printed is what a container's process printed, read while it runs.
type printed struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (p *printed) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.b.Write(b)
}

func (p *printed) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.b.String()
}

// Output is what the container printed, once it has exited.
func (c *Container) Output() (string, bool) {
	select {
	case <-c.done:
		return c.out.String(), true
	default:
		return "", false
	}
}

// Printed is what the container has printed so far.
func (c *Container) Printed() string { return c.out.String() }

// Write writes s to the stdin of a container started with one open.
func (c *Container) Write(s string) error {
	if c.stdin == nil {
		return fmt.Errorf("container of pod %s/%s has no stdin open", c.Namespace, c.Pod)
	}
	_, err := io.WriteString(c.stdin, s)
	return err
}

// Env is the container's environment variable name, as the kubelet gave it.
func (c *Container) Env(name string) (string, bool) {
	for _, e := range c.Config.Envs {
		if e.Key == name {
			return string(e.Value), true
		}
	}
	return "", false
}

// StartRuntime serves a runtime on socket whose containers' programs are
// those of the folder image; env is the node's, which every container's
// process has first (the simulated GPU's settings, where a real node has
// its devices); scratch a folder for the containers' file systems.
func StartRuntime(socket, image, scratch string, env []string) (*Runtime, error) {
	os.Remove(socket)
	l, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	r := &Runtime{
		RemoteRuntime: &fakeremote.RemoteRuntime{RuntimeService: apitest.NewFakeRuntimeService(), ImageService: apitest.NewFakeImageService()},
		env:           env, image: image, scratch: scratch,
		srv: grpc.NewServer(), containers: map[string]*Container{},
	}
	r.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true}, {Type: runtimeapi.NetworkReady, Status: true},
	}}
	// Any image "pulled" is the image folder; the kubelet takes an image
	// of no size for one not there.
	r.ImageService.SetFakeImageSize(1)
	runtimeapi.RegisterRuntimeServiceServer(r.srv, r)
	runtimeapi.RegisterImageServiceServer(r.srv, r.RemoteRuntime)
	go r.srv.Serve(l)
	return r, nil
}

// Stop stops serving and kills the containers still running, as a
// machine going down.
func (r *Runtime) Stop() {
	r.srv.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.containers {
		if c.cmd != nil && c.cmd.Process != nil {
			c.cmd.Process.Kill()
		}
	}
	for _, c := range r.containers {
		if c.cmd != nil {
			<-c.done
		}
	}
}

// Container is the last container the kubelet created for pod ns/pod,
// nil if none.
func (r *Runtime) Container(ns, pod string) *Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last *Container
	for _, c := range r.containers {
		if c.Namespace == ns && c.Pod == pod && (last == nil || c.seq > last.seq) {
			last = c
		}
	}
	return last
}

func (r *Runtime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	if err := r.injectCDI(req.Config); err != nil {
		return nil, err
	}
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	md := req.SandboxConfig.GetMetadata()
	// Where the kubelet reads the container's log (its log manager looks
	// for it): the output goes there as it goes to a runtime's.
	logPath := filepath.Join(req.SandboxConfig.GetLogDirectory(), req.Config.GetLogPath())
	r.RuntimeService.Lock()
	if ct := r.RuntimeService.Containers[resp.ContainerId]; ct != nil {
		ct.LogPath = logPath
	}
	r.RuntimeService.Unlock()
	r.mu.Lock()
	r.created++
	r.containers[resp.ContainerId] = &Container{Namespace: md.GetNamespace(), Pod: md.GetName(), Config: req.Config, seq: r.created, log: logPath, done: make(chan struct{})}
	r.mu.Unlock()
	return resp, nil
}

// injectCDI resolves the container's CDI devices as a runtime does and
// adds their edits to its configuration: environment, mounts and device
// nodes (hooks are not run here).
func (r *Runtime) injectCDI(cfg *runtimeapi.ContainerConfig) error {
	if len(cfg.CDIDevices) == 0 {
		return nil
	}
	if len(r.CDISpecDirs) == 0 {
		return fmt.Errorf("CDI devices %v asked of a runtime with CDI off", cfg.CDIDevices)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(r.CDISpecDirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return err
	}
	var names []string
	for _, d := range cfg.CDIDevices {
		names = append(names, d.Name)
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, names...); err != nil {
		return fmt.Errorf("CDI devices %v: %w", unresolved, err)
	}
	for _, e := range spec.Process.Env {
		k, v, _ := strings.Cut(e, "=")
		cfg.Envs = append(cfg.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	for _, m := range spec.Mounts {
		cfg.Mounts = append(cfg.Mounts, &runtimeapi.Mount{ContainerPath: m.Destination, HostPath: m.Source})
	}
	for _, d := range spec.Linux.Devices {
		cfg.Devices = append(cfg.Devices, &runtimeapi.Device{ContainerPath: d.Path, HostPath: d.Path, Permissions: "rwm"})
	}
	return nil
}

func (r *Runtime) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	r.mu.Lock()
	c := r.containers[req.ContainerId]
	r.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("container %s not found", req.ContainerId)
	}
	cmd, err := r.command(c.Config)
	if err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	cl := &criLog{w: logFile}
	w := io.MultiWriter(&c.out, cl)
	cmd.Stdout, cmd.Stderr = w, w
	if c.Config.Stdin {
		if c.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	err = cmd.Start()
	if err == nil {
		c.cmd = cmd
	}
	r.mu.Unlock()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		cmd.Process.Kill()
	}
	go func() {
		err := cmd.Wait()
		if len(cl.partial) > 0 { // a last line without its newline
			cl.Write([]byte("\n"))
		}
		logFile.Close()
		exit := cmd.ProcessState.ExitCode()
		if err != nil && exit == 0 {
			exit = 128
		}
		r.RuntimeService.Lock()
		if ct := r.RuntimeService.Containers[req.ContainerId]; ct != nil {
			ct.State = runtimeapi.ContainerState_CONTAINER_EXITED
			ct.ExitCode = int32(exit)
			ct.FinishedAt = time.Now().UnixNano()
			ct.Reason = "Completed"
			if exit != 0 {
				ct.Reason = "Error"
			}
		}
		r.RuntimeService.Unlock()
		close(c.done)
	}()
	return resp, err
}

// StopContainer ends the container as a runtime does: its stdin closed
// and SIGTERM, SIGKILL after the grace period.
func (r *Runtime) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	r.mu.Lock()
	c := r.containers[req.ContainerId]
	var cmd *exec.Cmd
	if c != nil {
		cmd = c.cmd
	}
	r.mu.Unlock()
	if cmd != nil {
		if c.stdin != nil {
			c.stdin.Close()
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(time.Duration(req.Timeout)*time.Second + time.Second):
			cmd.Process.Kill()
			<-c.done
		}
		return &runtimeapi.StopContainerResponse{}, nil
	}
	return r.RemoteRuntime.StopContainer(ctx, req)
}

// command is the container's process: its program from the image folder,
// the kubelet's environment after the node's (a value naming a mount's
// container path names its host path: the process sees the node's files
// but for /etc and /usr), and the user the kubelet asked for.
func (r *Runtime) command(cfg *runtimeapi.ContainerConfig) (*exec.Cmd, error) {
	args := slices.Concat(cfg.Command, cfg.Args)
	if len(args) == 0 {
		return nil, fmt.Errorf("container %s has no command", cfg.GetMetadata().GetName())
	}
	var binds [][2]string
	for _, m := range cfg.Mounts {
		binds = append(binds, [2]string{m.HostPath, m.ContainerPath})
	}
	env := slices.Clone(r.env)
	for _, e := range cfg.Envs {
		v := string(e.Value)
		for _, m := range cfg.Mounts {
			if v == m.ContainerPath {
				v = m.HostPath
			}
		}
		env = append(env, e.Key+"="+v)
	}
	cmd, err := Command(r.scratch, binds, credential(cfg.GetLinux().GetSecurityContext()), filepath.Join(r.image, args[0]), args[1:]...)
	if err != nil {
		return nil, err
	}
	cmd.Env = env
	return cmd, nil
}

// credential is the user the kubelet asked the container to run as; nil
// (this process's, root) where it asked for none.
func credential(sc *runtimeapi.LinuxContainerSecurityContext) *syscall.Credential {
	if sc.GetRunAsUser() == nil && sc.GetRunAsGroup() == nil && len(sc.GetSupplementalGroups()) == 0 {
		return nil
	}
	cred := &syscall.Credential{}
	if u := sc.GetRunAsUser(); u != nil {
		cred.Uid = uint32(u.Value)
	}
	if g := sc.GetRunAsGroup(); g != nil {
		cred.Gid = uint32(g.Value)
	}
	for _, g := range sc.GetSupplementalGroups() {
		cred.Groups = append(cred.Groups, uint32(g))
	}
	return cred
}

// Command runs prog as cred (nil: this process's user). Of binds (host
// path, container path), those the dynamic loader reads at their container
// paths (under /etc and /usr: no variable names them) are made for real,
// in a mount namespace of the program's own over overlays of /etc and
// /usr in a folder of scratch, so the node is left as it was.
func Command(scratch string, binds [][2]string, cred *syscall.Credential, prog string, args ...string) (*exec.Cmd, error) {
	var flat []string
	for _, b := range binds {
		if strings.HasPrefix(b[1], "/etc/") || strings.HasPrefix(b[1], "/usr/") {
			flat = append(flat, b[0], b[1])
		}
	}
	if len(flat) == 0 {
		cmd := exec.Command(prog, args...)
		// Containers go down with their runtime.
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
		return cmd, nil
	}
	upper, err := os.MkdirTemp(scratch, "container-")
	if err != nil {
		return nil, err
	}
	script := `set -e
u=$1 binds=$2; shift 2
mount -t tmpfs tmpfs "$u"
for top in /etc /usr; do
	mkdir "$u$top" "$u$top.work"
	mount -t overlay overlay -o "lowerdir=$top,upperdir=$u$top,workdir=$u$top.work" "$top"
done
while [ "$binds" -gt 0 ]; do
	mkdir -p "$(dirname "$2")"
	if [ -d "$1" ]; then mkdir -p "$2"; else touch "$2"; fi
	mount --bind "$1" "$2"
	shift 2; binds=$((binds - 1))
done
exec "$@"`
	exe := []string{prog}
	if cred != nil {
		groups := "--clear-groups"
		if len(cred.Groups) > 0 {
			groups = "--groups=" + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(cred.Groups)), ","), "[]")
		}
		exe = []string{"setpriv", fmt.Sprintf("--reuid=%d", cred.Uid), fmt.Sprintf("--regid=%d", cred.Gid), groups, prog}
	}
	cmd := exec.Command("sh", slices.Concat([]string{"-c", script, "sh", upper, fmt.Sprint(len(flat) / 2)}, flat, exe, args)...)
	// Go makes the new namespace's mounts private.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

// criLog writes a container's output in the CRI's log format, a line at a
// time: time, stream, F (a full line), the text.
type criLog struct {
	w       io.Writer
	partial []byte
}

func (l *criLog) Write(b []byte) (int, error) {
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		fmt.Fprintf(l.w, "%s stdout F %s\n", time.Now().Format(time.RFC3339Nano), l.partial[:i])
		l.partial = l.partial[i+1:]
	}
}
