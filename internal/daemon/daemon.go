// Package daemon is the node daemon: the owner of the tenants of a node.
// It holds the tenants created through it (as a member of each, like a
// flexgv run), serves the local API over a unix socket and Prometheus
// metrics over HTTP. The shim never talks to it: tenants are enforced from
// their files whether it runs or not.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/local"

	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/metrics"
	"github.com/flexgv/flexgv/internal/mps"
	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

// Config is how a daemon runs.
type Config struct {
	StateDir    string    // where the tenant files are
	Socket      string    // the API's unix socket; "": Socket(StateDir)
	MetricsAddr string    // HOST:PORT of /metrics; "": none
	Log         io.Writer // what it does, line by line
	// MPS: the daemon makes sure an MPS control daemon runs on the node
	// (in mps.PipeDir()) for as long as it runs; one it started, it stops.
	// MPSProbe starts CUDA as an MPS client must within MPSTimeout
	// (mps.Serves) before the daemon goes on; else the daemon stops the
	// control daemon it started and fails.
	MPS        bool
	MPSProbe   []string
	MPSTimeout time.Duration
	// With, if set, runs in the daemon's process beside the API, calling
	// it directly (no socket between), until its context ends: when the
	// daemon stops, which waits for it before letting go of the tenants.
	With func(ctx context.Context, api flexgvv1.DaemonServer)
}

// stopGrace is how long calls in progress may take to finish on shutdown.
const stopGrace = 5 * time.Second

// Run runs the daemon until ctx is done, then releases the tenants it
// holds: those no run holds are removed, as when any member leaves.
func Run(ctx context.Context, cfg Config) error {
	logger := log.New(cfg.Log, "flexgv daemon: ", 0)
	socket := cfg.Socket
	if socket == "" {
		socket = Socket(cfg.StateDir)
	}
	if err := tenant.MakeDir(cfg.StateDir); err != nil {
		return fmt.Errorf("tenant state folder %s: %w", cfg.StateDir, err)
	}
	lock, err := lockState(cfg.StateDir)
	if errors.Is(err, errBusy) {
		if answers(socket) {
			return fmt.Errorf("another flexgv daemon answers on %s", socket)
		}
		return fmt.Errorf("another flexgv daemon keeps the tenants of %s", cfg.StateDir)
	}
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := clearSocket(socket); err != nil {
		return err
	}
	var metricsLis net.Listener
	if cfg.MetricsAddr != "" {
		if metricsLis, err = net.Listen("tcp", cfg.MetricsAddr); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		defer metricsLis.Close()
	}
	if cfg.MPS {
		stop, err := runMPS(cfg, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	h, adopted, problems, err := adopt(cfg.StateDir)
	if err != nil {
		return err
	}
	defer h.releaseAll()
	if len(adopted) > 0 {
		logger.Printf("re-adopted tenants %s", strings.Join(adopted, ", "))
	}
	for _, p := range problems {
		logger.Printf("warning: %v", p)
	}
	lis, err := listen(socket)
	if err != nil {
		return err
	}
	n := &nvml{gpus: gpuinfo.GPUs, devices: gpuinfo.Devices}
	srv := grpc.NewServer(grpc.Creds(local.NewCredentials()))
	a := newAPI(cfg.StateDir, h, n, cfg.Log)
	flexgvv1.RegisterDaemonServer(srv, a)
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(lis) }()
	withDone := make(chan struct{})
	wctx, stopWith := context.WithCancel(ctx)
	if cfg.With != nil {
		go func() { cfg.With(wctx, a); close(withDone) }()
	} else {
		close(withDone)
	}
	var hs *http.Server
	where := "serving on " + socket
	if metricsLis != nil {
		hs = &http.Server{Handler: metricsHandler(cfg.StateDir, h, n, cfg.MPS, logger), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- hs.Serve(metricsLis) }()
		where += ", metrics on http://" + metricsLis.Addr().String() + "/metrics"
	}
	logger.Print(where)
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	stopWith()
	<-withDone
	if hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), stopGrace)
		hs.Shutdown(sctx)
		cancel()
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(stopGrace):
		srv.Stop()
	}
	if names := h.names(); len(names) > 0 {
		logger.Printf("stopping; releasing tenants %s", strings.Join(names, ", "))
	}
	return err
}

// runMPS starts an MPS control daemon where CUDA looks for one, unless one
// answers there already, checks that it serves a CUDA program, and returns
// what stops it: nothing for one found. One it started that does not serve
// is stopped: a node whose CUDA programs hang at their start is worse off
// than one without MPS.
func runMPS(cfg Config, logger *log.Logger) (func(), error) {
	dir := mps.PipeDir()
	if mps.Running(dir) {
		if err := mps.Serves(dir, cfg.MPSProbe, cfg.MPSTimeout); err != nil {
			return nil, fmt.Errorf("MPS: the control daemon that answers in %s does not serve CUDA programs: %v "+
				"(left running: this daemon did not start it)", dir, err)
		}
		logger.Printf("MPS: using the control daemon that answers in %s", dir)
		return func() {}, nil
	}
	logDir := filepath.Join(cfg.StateDir, "mps-log")
	if err := mps.Start(dir, logDir); err != nil {
		return nil, err
	}
	if err := mps.Serves(dir, cfg.MPSProbe, cfg.MPSTimeout); err != nil {
		if serr := mps.Stop(dir); serr != nil {
			return nil, fmt.Errorf("MPS: the control daemon started in %s does not serve CUDA programs: %v; "+
				"stopping it failed: %v (MPS logs in %s)", dir, err, serr, logDir)
		}
		return nil, fmt.Errorf("MPS: the control daemon started in %s does not serve CUDA programs: %v; stopped it (MPS logs in %s)",
			dir, err, logDir)
	}
	logger.Printf("MPS: started the control daemon in %s", dir)
	return func() {
		if err := mps.Stop(dir); err != nil {
			logger.Printf("MPS: %v", err)
		} else {
			logger.Printf("MPS: stopped the control daemon in %s", dir)
		}
	}, nil
}

// metricsHandler serves /metrics, collected when scraped. A scrape that
// cannot read the tenants still gets the rest; the daemon's log says why.
func metricsHandler(dir string, h *held, n *nvml, withMPS bool, logger *log.Logger) http.Handler {
	var mpsUp func() bool
	if withMPS {
		mpsUp = func() bool { return mps.Running(mps.PipeDir()) }
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		metrics.New(metrics.Source{
			MPS:     mpsUp,
			Tenants: func() ([]tenant.Info, []error, error) { return tenant.List(dir) },
			Devices: n.Devices,
			Held:    h.count,
			Labels:  h.allLabels,
			Sched: func() ([]*sched.GPU, error) {
				gpus, bad, err := sched.List(dir)
				for _, b := range bad {
					logger.Printf("metrics: skipping %v", b)
				}
				return gpus, err
			},
		}),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: logger, ErrorHandling: promhttp.ContinueOnError}))
	return mux
}

// answers reports whether something accepts connections on socket.
func answers(socket string) bool {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// clearSocket makes room for the daemon's socket: refused if a daemon
// answers there, a socket a dead one left is removed.
func clearSocket(socket string) error {
	st, err := os.Lstat(socket)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.Mode()&fs.ModeSocket == 0:
		return fmt.Errorf("%s exists and is not a socket; remove it or give another --socket", socket)
	case answers(socket):
		return fmt.Errorf("another flexgv daemon answers on %s", socket)
	}
	if err := os.Remove(socket); err != nil {
		return fmt.Errorf("removing the stale socket %s: %w", socket, err)
	}
	return nil
}

// maxSocketPath is what a unix socket address holds, less its NUL.
const maxSocketPath = len(unix.RawSockaddrUnix{}.Path) - 1

// listen creates the API's socket, for this user only: its mode says so to
// other users' clients, and the listener drops their connections, since
// they may connect before the mode is set.
func listen(socket string) (net.Listener, error) {
	if len(socket) > maxSocketPath {
		return nil, fmt.Errorf("socket %s: longer than the %d bytes a unix socket path can have", socket, maxSocketPath)
	}
	lis, err := net.Listen("unix", socket)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		lis.Close()
		return nil, err
	}
	return sameUser{lis.(*net.UnixListener)}, nil
}

// sameUser accepts connections from the daemon's user and root only.
type sameUser struct{ *net.UnixListener }

func (l sameUser) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if peerAllowed(c) {
			return c, nil
		}
		c.Close()
	}
}

func peerAllowed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	return err == nil && cred != nil && (cred.Uid == 0 || cred.Uid == uint32(os.Geteuid()))
}
