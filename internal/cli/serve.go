package cli

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/launch"
	"github.com/flexgv/flexgv/internal/mps"
	"github.com/flexgv/flexgv/internal/remote"
	"github.com/flexgv/flexgv/internal/tenant"
)

func newServe(g *globals, stderr io.Writer) *cobra.Command {
	var listen, admin, gpus, tlsCert, tlsKey, tenantDir, moduleCache, moduleCacheMax, pinnedMax, maxConns, execUser, execMemory string
	var open bool
	var tenants serveTenants
	c := &cobra.Command{
		Use:   "serve --listen ADDR [--gpus LIST] [--tls-cert FILE --tls-key FILE] [--tenant NAME:TOKEN_FILE [LIMITS]]... [--tenant-dir DIR]",
		Short: "Serve this machine's GPUs to programs run with flexgv run --remote",
		Long: "Listens on ADDR (unix:///PATH, which clients on this host may also dial as shm:///PATH to pass their\n" +
			"calls through shared memory; tcp://HOST:PORT; or tls://HOST:PORT: TCP with TLS 1.3 and the\n" +
			"certificate of --tls-cert and --tls-key) and gives every connection an executor process of its own\n" +
			"that calls the CUDA driver for that program alone. When the program ends or its connection drops,\n" +
			"its executor exits and the driver frees everything it held.\n\n" +
			"With --tenant, a client must present one tenant's token (flexgv run --remote ADDR --token-file FILE)\n" +
			"and its executor runs in that tenant, under the shim: the limits given after the --tenant (--mem,\n" +
			"--compute, --compute-max, --priority, --sm, --ctx-mem, as for flexgv run) are enforced on the server, where\n" +
			"the client cannot reach them, and flexgv ps here lists the tenant and its executors. A --tenant without\n" +
			"limits joins the existing group of that name (flexgv run --group, the node daemon). --tenant-dir DIR\n" +
			"admits the tenants whose token files NAME.token are in DIR when a client connects (files of the\n" +
			"server's user, mode 0600): a tenant is added or revoked by writing or removing its file, without a\n" +
			"restart; tenant NAME must exist with its limits (the node daemon holds it). Without either,\n" +
			"anyone who can connect is served without limits: a unix socket is then left to its owner (umask),\n" +
			"and TCP needs --open. tcp:// is not encrypted: use it inside a trusted network, else tls://.\n\n" +
			"flexgv migrate asks the server through its admin socket (--admin) to move running programs to\n" +
			"another server; only the server's user and root may use it.",
		Example: "  flexgv serve --listen unix:///run/flexgv.sock\n" +
			"  flexgv serve --listen tls://0.0.0.0:7070 --tls-cert server.pem --tls-key server.key --gpus 0,1 \\\n" +
			"      --tenant team-a:/etc/flexgv/team-a.token --mem 8GiB --compute 30% --priority high \\\n" +
			"      --tenant team-b:/etc/flexgv/team-b.token --mem 16GiB",
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if listen == "" {
				return usageError{fmt.Errorf("flexgv serve: --listen is required (unix:///PATH, tcp://HOST:PORT or tls://HOST:PORT)")}
			}
			addr, err := remote.ParseAddr(listen)
			if err != nil {
				return usageError{fmt.Errorf("flexgv serve: --listen %w", err)}
			}
			authed := len(tenants) > 0 || tenantDir != ""
			switch {
			case addr.Network == "shm":
				return usageError{fmt.Errorf("flexgv serve: --listen %s: listen on unix://%s; clients on this host may dial it as shm://%s (shared memory)", addr, addr.Address, addr.Address)}
			case open && len(tenants) > 0:
				return usageError{fmt.Errorf("flexgv serve: --open and --tenant: give one (--open serves anyone, --tenant only token holders)")}
			case open && tenantDir != "":
				return usageError{fmt.Errorf("flexgv serve: --open and --tenant-dir: give one (--open serves anyone, --tenant-dir only token holders)")}
			case addr.Network != "unix" && !open && !authed:
				return usageError{fmt.Errorf("flexgv serve: --listen %s: give --tenant NAME:TOKEN_FILE or --tenant-dir DIR (clients authenticate), "+
					"or --open to serve anyone who can reach the port, without limits", addr)}
			case addr.Network == "tls" && (tlsCert == "" || tlsKey == ""):
				return usageError{fmt.Errorf("flexgv serve: --listen %s needs --tls-cert and --tls-key", addr)}
			case addr.Network != "tls" && (tlsCert != "" || tlsKey != ""):
				return usageError{fmt.Errorf("flexgv serve: --tls-cert and --tls-key are for --listen tls://HOST:PORT")}
			}
			adminPath, err := remote.AdminPath(admin, addr)
			if err != nil {
				return usageError{fmt.Errorf("flexgv serve: --admin: %w", err)}
			}
			var tlsConfig *tls.Config
			if addr.Network == "tls" {
				cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
				if err != nil {
					return usageError{fmt.Errorf("flexgv serve: --tls-cert %s --tls-key %s: %w", tlsCert, tlsKey, err)}
				}
				tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
			}
			visible, err := remote.ParseGPUs(gpus)
			if err != nil {
				return usageError{fmt.Errorf("flexgv serve: %w", err)}
			}
			exe, err := remote.Built("flexgv-executor")
			if err != nil {
				return exitError{1, "flexgv serve: " + err.Error()}
			}
			driver := g.driver
			if driver != "" {
				if driver, err = filepath.Abs(driver); err == nil {
					_, err = os.Stat(driver)
				}
				if err != nil {
					return usageError{fmt.Errorf("flexgv serve: --driver %s: no such file", g.driver)}
				}
			}
			cache, err := moduleCacheDir(moduleCache)
			if err != nil {
				return usageError{fmt.Errorf("flexgv serve: --module-cache: %w", err)}
			}
			var cacheMax int64
			if moduleCacheMax != "" {
				n, err := tenant.ParseSize(moduleCacheMax)
				if err != nil || n == 0 || n > 1<<62 {
					return usageError{fmt.Errorf("flexgv serve: --module-cache-max: %q is not a size (a number with B, KiB, MiB or GiB, more than 0)", moduleCacheMax)}
				}
				cacheMax = int64(n)
			}
			pinned := int64(-1)
			if pinnedMax != "" {
				n, err := tenant.ParseSize(pinnedMax)
				if err != nil || n > 1<<62 {
					return usageError{fmt.Errorf("flexgv serve: --pinned-max: %q is not a size (a number with B, KiB, MiB or GiB; 0: none)", pinnedMax)}
				}
				pinned = int64(n)
			}
			conns := remote.DefaultMaxConnsPerTenant
			if maxConns != "" {
				if conns, err = strconv.Atoi(maxConns); err != nil || conns < 1 || conns > 1<<20 {
					return usageError{fmt.Errorf("flexgv serve: --max-conns-per-tenant: %q is not a number of connections (1 to %d)", maxConns, 1<<20)}
				}
			}
			var runAs *remote.ExecUser
			switch {
			case os.Geteuid() == 0 && execUser == "root":
				fmt.Fprintf(stderr, "flexgv serve: warning: executors run as root (--executor-user root): a client that takes one over has root on this machine\n")
			case os.Geteuid() == 0 && execUser != "":
				if runAs, err = remote.LookupExecUser(execUser); err != nil {
					return usageError{fmt.Errorf("flexgv serve: --executor-user %s: %v", execUser, err)}
				}
			case execUser != "":
				return usageError{fmt.Errorf("flexgv serve: --executor-user: only a server run as root can run executors as another user")}
			case os.Geteuid() == 0:
				if runAs, err = remote.DefaultExecUser(); err != nil {
					return usageError{fmt.Errorf("flexgv serve: run as root, executors run as an unprivileged user: %v; give --executor-user NAME (--executor-user root: as root)", err)}
				}
			}
			var cgroups *remote.ExecCgroups
			if execMemory != "" {
				n, err := tenant.ParseSize(execMemory)
				if err != nil || n < 64<<20 || n > 1<<62 {
					return usageError{fmt.Errorf("flexgv serve: --executor-memory: %q is not a size of 64MiB or more (a number with B, KiB, MiB or GiB)", execMemory)}
				}
				if cgroups, err = remote.NewExecCgroups(int64(n)); err != nil {
					fmt.Fprintf(stderr, "flexgv serve: --executor-memory: executors' memory is not limited: %v\n", err)
				}
			}
			s := &remote.Server{User: runAs, Cgroups: cgroups, Executor: exe, Driver: driver, GPUs: visible, Env: executorEnv(visible != ""), TLS: tlsConfig, Log: stderr,
				ModuleCache: cache, ModuleCacheMax: cacheMax, PinnedMax: pinned, MaxConnsPerTenant: conns}
			if len(tenants) > 0 {
				release, err := tenants.acquire(g.shim, driver, s)
				if err != nil {
					return err
				}
				defer release()
			}
			if tenantDir != "" {
				if err := remote.CheckTenantDir(tenantDir); err != nil {
					return usageError{fmt.Errorf("flexgv serve: --tenant-dir: %w", err)}
				}
				shim, err := launch.FindShim(g.shim)
				if err != nil {
					return exitError{1, "flexgv serve: " + err.Error()}
				}
				s.Lookup = remote.TenantDir{Dir: tenantDir, StateDir: tenant.Dir(), Env: func(path string, compute bool, sm uint32) []string {
					env := append([]string{"FLEXGV_TENANT=" + path}, mps.Env(mps.PipeDir(), sm)...)
					if compute {
						env = append(env, "FLEXGV_COMPUTE=1")
					}
					return launch.Environ(nil, shim, launch.Options{Driver: driver, Env: env})
				}}.Lookup
			}
			l, err := remote.Listen(addr)
			if err != nil {
				return exitError{1, "flexgv serve: " + err.Error()}
			}
			// With tenants, the tokens decide who is served: any local user
			// may connect to the socket.
			if addr.Network == "unix" && authed {
				if err := os.Chmod(addr.Address, 0o666); err != nil {
					l.Close()
					return exitError{1, "flexgv serve: " + err.Error()}
				}
			}
			al, err := remote.ListenAdmin(adminPath)
			if err != nil {
				l.Close()
				return exitError{1, "flexgv serve: " + err.Error() + " (give another with --admin unix:///PATH)"}
			}
			defer al.Close()
			// Ready before it says it listens.
			if err := s.Prepare(); err != nil {
				l.Close()
				return exitError{1, "flexgv serve: " + err.Error()}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			names := make([]string, len(s.Tenants))
			for i, t := range s.Tenants {
				names[i] = t.Name
			}
			if tenantDir != "" {
				names = append(names, "those of "+tenantDir)
			}
			if runAs != nil && len(names) > 0 {
				fmt.Fprintf(stderr, "flexgv serve: executors run as %s, but those of tenants with an SM share (MPS clients: an MPS server serves one user at a time) as this server's user\n", runAs.Name)
			} else if runAs != nil {
				fmt.Fprintf(stderr, "flexgv serve: executors run as %s\n", runAs.Name)
			}
			if len(names) > 0 {
				fmt.Fprintf(stderr, "flexgv serve: listening on %s for tenants %s\n", addr, strings.Join(names, ", "))
			} else {
				fmt.Fprintf(stderr, "flexgv serve: listening on %s, open to anyone who can connect, without limits\n", addr)
			}
			fmt.Fprintf(stderr, "flexgv serve: admin socket %s (flexgv migrate)\n", adminPath)
			adminDone := make(chan struct{})
			go func() {
				defer close(adminDone)
				if err := s.ServeAdmin(ctx, al); err != nil {
					fmt.Fprintf(stderr, "flexgv serve: admin socket: %v; flexgv migrate cannot reach this server\n", err)
				}
			}()
			err = s.Serve(ctx, l)
			stop()
			<-adminDone
			if err != nil {
				return exitError{1, "flexgv serve: " + err.Error()}
			}
			return nil
		},
	}
	c.Flags().StringVar(&listen, "listen", "", "where to listen: unix:///PATH, tcp://HOST:PORT or tls://HOST:PORT")
	c.Flags().StringVar(&admin, "admin", "", "the admin socket flexgv migrate asks, unix:///PATH (default: beside a unix socket, PATH.admin; else $XDG_RUNTIME_DIR/flexgv/serve-HOST-PORT.admin, or /tmp/flexgv-UID/...)")
	c.Flags().StringVar(&gpus, "gpus", "", "the GPUs to serve, as indexes or UUIDs (default: all)")
	c.Flags().StringVar(&tlsCert, "tls-cert", "", "with --listen tls://: the server's certificate chain (PEM)")
	c.Flags().StringVar(&tlsKey, "tls-key", "", "with --listen tls://: the certificate's private key (PEM)")
	c.Flags().StringVar(&tenantDir, "tenant-dir", "", "admit the tenants whose token files NAME.token are in this folder when a client connects (tenant NAME must exist)")
	c.Flags().StringVar(&moduleCache, "module-cache", "", "where to keep module images that clients across a network send, by SHA-256, a folder per tenant, so that they are sent once (default: the user's cache folder, flexgv/modules; off: keep none)")
	c.Flags().StringVar(&moduleCacheMax, "module-cache-max", "", "how much module images one tenant's folder of --module-cache keeps at most (default 8GiB); past it no more are kept")
	c.Flags().StringVar(&pinnedMax, "pinned-max", "", "how much of the server's memory a connection over shm:// may pin for the program's pinned host memory, and again for its graphs' copies of pageable memory (default: a quarter of the server's memory; 0: none, pinned memory is then copied as pageable memory is)")
	c.Flags().StringVar(&maxConns, "max-conns-per-tenant", "", fmt.Sprintf("how many connections (each an executor process) one tenant may hold at once; more are refused with why (default %d)", remote.DefaultMaxConnsPerTenant))
	c.Flags().StringVar(&execUser, "executor-user", "", "with the server run as root: the unprivileged user the executors run as, tenants' included (default: "+remote.DefaultExecUserNames+"; root: as root, said at start)")
	c.Flags().StringVar(&execMemory, "executor-memory", "", "the host memory each executor may use (the driver's included), as a cgroup v2 memory limit where the host offers one")
	c.Flags().BoolVar(&open, "open", false, "serve anyone who can connect, without tenants or limits (needed for TCP without --tenant)")
	tenants.register(c)
	return c
}

// serveTenants are the --tenant flags of flexgv serve, in order, each with
// the limit flags that follow it.
type serveTenants []*serveTenant

type serveTenant struct {
	name, tokenFile string
	q               quotaFlags
	given           map[string]bool
}

// tenantFlag is --tenant NAME:TOKEN_FILE: it starts a tenant.
type tenantFlag struct{ ts *serveTenants }

func (f tenantFlag) String() string { return "" }
func (f tenantFlag) Type() string   { return "NAME:TOKEN_FILE" }
func (f tenantFlag) Set(v string) error {
	name, file, ok := strings.Cut(v, ":")
	if !ok || file == "" {
		return fmt.Errorf("want NAME:TOKEN_FILE")
	}
	if err := tenant.CheckName(name); err != nil {
		return err
	}
	for _, t := range *f.ts {
		if t.name == name {
			return fmt.Errorf("tenant %s is given twice", name)
		}
	}
	t := &serveTenant{name: name, tokenFile: file, given: map[string]bool{}}
	t.q = quotaFlags{ctxMem: "512MiB", group: name, changed: func(n string) bool { return t.given[n] }}
	*f.ts = append(*f.ts, t)
	return nil
}

// limitFlag is one of the limits of the --tenant before it.
type limitFlag struct {
	ts   *serveTenants
	name string
}

func (f limitFlag) String() string { return "" }
func (f limitFlag) Type() string   { return "LIMIT" }
func (f limitFlag) Set(v string) error {
	if len(*f.ts) == 0 {
		return fmt.Errorf("limits apply to the --tenant NAME:TOKEN_FILE before them; give one first")
	}
	t := (*f.ts)[len(*f.ts)-1]
	if t.given[f.name] {
		return fmt.Errorf("given twice for tenant %s", t.name)
	}
	t.given[f.name] = true
	*map[string]*string{"mem": &t.q.mem, "compute": &t.q.compute, "compute-max": &t.q.computeMax,
		"priority": &t.q.priority, "sm": &t.q.sm, "ctx-mem": &t.q.ctxMem}[f.name] = v
	return nil
}

func (ts *serveTenants) register(c *cobra.Command) {
	c.Flags().Var(tenantFlag{ts}, "tenant", "a tenant: clients presenting the token in TOKEN_FILE; the limit flags after it are its own (repeatable)")
	for _, l := range []struct{ name, usage string }{
		{"mem", "the tenant's GPU memory quota, as flexgv run --mem"},
		{"compute", "the tenant's guaranteed share of GPU time, as flexgv run --compute"},
		{"compute-max", "the tenant's cap on GPU time, as flexgv run --compute-max"},
		{"priority", "the tenant's priority, as flexgv run --priority"},
		{"sm", "the tenant's percentage of each GPU's SMs under MPS, as flexgv run --sm"},
		{"ctx-mem", "memory charged per CUDA context when it cannot be measured, as flexgv run --ctx-mem (default 512MiB)"},
	} {
		c.Flags().Var(limitFlag{ts, l.name}, l.name, l.usage)
	}
}

// acquire reads the tenants' tokens, creates or joins every tenant as
// flexgv run does (the node daemon's groups, the GPUs' schedulers) for as
// long as the server runs, and gives s each tenant's executor environment:
// the shim preloaded, in the tenant.
func (ts serveTenants) acquire(shimFlag, driver string, s *remote.Server) (func(), error) {
	shim, err := launch.FindShim(shimFlag)
	if err != nil {
		return nil, exitError{1, "flexgv serve: " + err.Error()}
	}
	tokens := make([][]byte, len(ts))
	seen := map[[32]byte]string{}
	for i, t := range ts {
		token, err := remote.ReadToken(t.tokenFile)
		if err != nil {
			return nil, usageError{fmt.Errorf("flexgv serve: --tenant %s: %w", t.name, err)}
		}
		h := sha256.Sum256(token)
		if other, ok := seen[h]; ok {
			return nil, usageError{fmt.Errorf("flexgv serve: tenants %s and %s have the same token: each needs its own", other, t.name)}
		}
		seen[h], tokens[i] = t.name, token
	}
	var releases []func()
	release := func() {
		for _, r := range releases {
			r()
		}
	}
	for i, t := range ts {
		env, done, err := t.q.setup()
		if err != nil {
			release()
			return nil, usageError{fmt.Errorf("flexgv serve: --tenant %s: %w", t.name, err)}
		}
		releases = append(releases, done)
		// The executor's environment has no LD_PRELOAD or FLEXGV_DRIVER of
		// the server's (executorEnv): Environ adds exactly ours.
		env = launch.Environ(nil, shim, launch.Options{Driver: driver, Env: env})
		s.Tenants = append(s.Tenants, remote.NewTenant(t.name, tokens[i], env))
	}
	return release, nil
}

// executorEnv is the server's environment without what would make an
// executor a client of itself or put it in a tenant not its own, without
// FLEXGV_ON_ERROR (a tenant's executor whose tenant file cannot be used is
// refused CUDA: remote limits never fail open), and without
// CUDA_VISIBLE_DEVICES when --gpus replaces it.
// moduleCacheDir is the folder flag names, the user's cache folder's
// flexgv/modules when it is empty, "" for off; made (mode 0700).
func moduleCacheDir(flag string) (string, error) {
	if flag == "off" {
		return "", nil
	}
	dir := flag
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("%v (give a folder, or off)", err)
		}
		dir = filepath.Join(base, "flexgv", "modules")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return filepath.Abs(dir)
}

func executorEnv(gpus bool) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "FLEXGV_REMOTE", "FLEXGV_REMOTE_TOKEN_FILE", "FLEXGV_REMOTE_CA_FILE", "LD_PRELOAD", "FLEXGV_TENANT", "FLEXGV_COMPUTE",
			"FLEXGV_DRIVER", "FLEXGV_ON_ERROR":
			continue
		}
		if gpus && k == "CUDA_VISIBLE_DEVICES" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// remoteAlone refuses flags that would act in the program's process on a
// remote GPU: a tenant's limits there would be neither measured right nor
// enforceable; they belong on the server. --token-file needs --remote.
func remoteAlone(c *cobra.Command, addr string) error {
	if f := c.Flags().Lookup("token-file"); f.Changed && f.Value.String() == "" {
		return usageError{fmt.Errorf("flexgv run: --token-file is empty; give the token's file")}
	}
	if addr == "" {
		if c.Flags().Changed("token-file") {
			return usageError{fmt.Errorf("flexgv run: --token-file is for --remote ADDR")}
		}
		return nil
	}
	for _, name := range []string{"mem", "compute", "compute-max", "priority", "sm", "group", "ctx-mem"} {
		if f := c.Flags().Lookup(name); f != nil && f.Changed {
			return usageError{fmt.Errorf("flexgv run: --%s with --remote: a remote program's limits are set on the server "+
				"(flexgv serve --tenant NAME:TOKEN_FILE --%s ...), not by the client", name, name)}
		}
	}
	return nil
}

// failover is flexgv run --failover ADDR2[,ADDR3...] [--checkpoint-every
// D]: the remote program's state kept on a second server, where it goes on
// when its server is lost, then on the next (remote/client/failover.c).
type failover struct {
	addr  string
	every time.Duration
}

func (f *failover) register(c *cobra.Command) {
	c.Flags().StringVar(&f.addr, "failover", "", "with --remote: keep checkpoints of the program on flexgv serve at ADDR2, and go on there when the server is lost; ADDR2,ADDR3,... go on at each in turn (up to 8), then at ADDR (or where flexgv migrate moved the program) again should it come back")
	c.Flags().DurationVar(&f.every, "checkpoint-every", time.Minute, "with --failover: how often a checkpoint is taken (1ms to 24h)")
}

// env is what the program's library is told, or why the flags are wrong.
func (f *failover) env(c *cobra.Command, remoteAddr string) ([]string, error) {
	if f.addr == "" {
		if c.Flags().Changed("failover") {
			return nil, usageError{fmt.Errorf("flexgv run: --failover is empty; give the failover server's address")}
		}
		if c.Flags().Changed("checkpoint-every") {
			return nil, usageError{fmt.Errorf("flexgv run: --checkpoint-every is for --failover ADDR2")}
		}
		return nil, nil
	}
	if remoteAddr == "" {
		return nil, usageError{fmt.Errorf("flexgv run: --failover is for remote programs (--remote ADDR)")}
	}
	parts := strings.Split(f.addr, ",")
	if len(parts) > 8 {
		return nil, usageError{fmt.Errorf("flexgv run: --failover names %d servers: at most 8", len(parts))}
	}
	var addrs []string
	for _, p := range parts {
		a, err := remote.ParseAddr(p)
		if err != nil {
			return nil, usageError{fmt.Errorf("flexgv run: --failover %w", err)}
		}
		addrs = append(addrs, a.String())
	}
	if f.every < time.Millisecond || f.every > 24*time.Hour {
		return nil, usageError{fmt.Errorf("flexgv run: --checkpoint-every %v: want 1ms to 24h", f.every)}
	}
	return []string{"FLEXGV_REMOTE_FAILOVER=" + strings.Join(addrs, ","), fmt.Sprintf("FLEXGV_REMOTE_CHECKPOINT_MS=%d", f.every.Milliseconds())}, nil
}

// remoteRun prepares flexgv run --remote ADDR: the remoting libcuda.so.1
// first on the library path and as the shim's driver, its nvidia-smi first
// on PATH (NVIDIA's refuses the client's NVML), and the token the
// program's connections present.
func remoteRun(addr, tokenFile string, o *launch.Options) error {
	a, err := remote.ParseAddr(addr)
	if err != nil {
		return usageError{fmt.Errorf("flexgv run: --remote %w", err)}
	}
	if o.Driver != "" {
		return usageError{fmt.Errorf("flexgv run: --driver and --remote both say which driver the program gets; give one")}
	}
	if tokenFile != "" {
		// Checked here so that a bad file is a clear error before the
		// program starts; the program's library reads it again.
		if _, err := remote.ReadToken(tokenFile); err != nil {
			return usageError{fmt.Errorf("flexgv run: --token-file: %w", err)}
		}
		abs, err := filepath.Abs(tokenFile)
		if err != nil {
			return usageError{fmt.Errorf("flexgv run: --token-file: %w", err)}
		}
		o.Env = append(o.Env, "FLEXGV_REMOTE_TOKEN_FILE="+abs)
	}
	lib, err := remote.Built("libcuda.so.1")
	if err != nil {
		return exitError{1, "flexgv run: " + err.Error()}
	}
	path := filepath.Dir(lib)
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		path += ":" + old
	}
	os.Setenv("LD_LIBRARY_PATH", path)
	if smi := remote.NvidiaSmi(filepath.Dir(lib)); smi != "" {
		os.Setenv("PATH", filepath.Dir(smi)+string(os.PathListSeparator)+os.Getenv("PATH"))
	}
	o.Driver = lib
	o.Env = append(o.Env, "FLEXGV_REMOTE="+a.String())
	return nil
}
