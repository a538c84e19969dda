package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/flexgv/flexgv/internal/launch"
	"github.com/flexgv/flexgv/internal/remote"
)

func newServe(g *globals, stderr io.Writer) *cobra.Command {
	var listen, gpus string
	c := &cobra.Command{
		Use:   "serve --listen ADDR [--gpus LIST]",
		Short: "Serve this machine's GPUs to programs run with flexgv run --remote",
		Long: "Listens on ADDR (unix:///PATH or tcp://HOST:PORT) and gives every connection an executor process\n" +
			"of its own that calls the CUDA driver for that program alone. When the program ends or its\n" +
			"connection drops, its executor exits and the driver frees everything it held. The connection is\n" +
			"not authenticated or encrypted yet: listen on a unix socket, or on TCP only inside a trusted network.",
		Example: "  flexgv serve --listen unix:///run/flexgv.sock\n" +
			"  flexgv serve --listen tcp://0.0.0.0:7070 --gpus 0,1",
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if listen == "" {
				return usageError{fmt.Errorf("flexgv serve: --listen is required (unix:///PATH or tcp://HOST:PORT)")}
			}
			addr, err := remote.ParseAddr(listen)
			if err != nil {
				return usageError{fmt.Errorf("flexgv serve: --listen %w", err)}
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
			l, err := remote.Listen(addr)
			if err != nil {
				return exitError{1, "flexgv serve: " + err.Error()}
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			s := &remote.Server{Executor: exe, Driver: driver, GPUs: visible, Env: executorEnv(visible != ""), Log: stderr}
			fmt.Fprintf(stderr, "flexgv serve: listening on %s\n", addr)
			if err := s.Serve(ctx, l); err != nil {
				return exitError{1, "flexgv serve: " + err.Error()}
			}
			return nil
		},
	}
	c.Flags().StringVar(&listen, "listen", "", "where to listen: unix:///PATH or tcp://HOST:PORT")
	c.Flags().StringVar(&gpus, "gpus", "", "the GPUs to serve, as indexes or UUIDs (default: all)")
	return c
}

// executorEnv is the server's environment without what would make an
// executor a client of itself, and without CUDA_VISIBLE_DEVICES when
// --gpus replaces it.
func executorEnv(gpus bool) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "FLEXGV_REMOTE" || k == "LD_PRELOAD" || (gpus && k == "CUDA_VISIBLE_DEVICES") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// remoteAlone refuses flags that would act in the program's process on a
// remote GPU: a tenant's quotas there would be neither measured right nor
// enforceable; they belong on the server.
func remoteAlone(c *cobra.Command, addr string) error {
	if addr == "" {
		return nil
	}
	for _, name := range []string{"mem", "compute-max", "group", "ctx-mem"} {
		if f := c.Flags().Lookup(name); f != nil && f.Changed {
			return usageError{fmt.Errorf("flexgv run: --%s with --remote: quotas of remote programs are not supported yet "+
				"(they will be set on the server)", name)}
		}
	}
	return nil
}

// remoteRun prepares flexgv run --remote ADDR: the remoting libcuda.so.1
// first on the library path and as the shim's driver.
func remoteRun(addr string, o *launch.Options) error {
	a, err := remote.ParseAddr(addr)
	if err != nil {
		return usageError{fmt.Errorf("flexgv run: --remote %w", err)}
	}
	if o.Driver != "" {
		return usageError{fmt.Errorf("flexgv run: --driver and --remote both say which driver the program gets; give one")}
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
	o.Driver = lib
	o.Env = append(o.Env, "FLEXGV_REMOTE="+a.String())
	return nil
}
