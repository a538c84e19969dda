// Package mps finds, starts and stops NVIDIA's MPS control daemon
// (nvidia-cuda-mps-control), through which the processes of a node share
// each GPU at once instead of taking turns, and a tenant's processes can be
// confined to a part of its SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
package mps

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Control is the name of the control daemon's program, looked up on PATH.
const Control = "nvidia-cuda-mps-control"

// PipeDir is where the control daemon of this environment listens, as CUDA
// looks for it: $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps.
func PipeDir() string {
	if d := os.Getenv("CUDA_MPS_PIPE_DIRECTORY"); d != "" {
		return d
	}
	return "/tmp/nvidia-mps"
}

// Running says whether a control daemon answers in dir. Its socket stays
// behind when it quits, so the file alone says nothing.
func Running(dir string) bool {
	// A packet socket (SOCK_SEQPACKET), as NVIDIA's daemon serves.
	c, err := net.DialTimeout("unixpacket", filepath.Join(dir, "control"), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Start starts a control daemon listening in dir, logging into logDir, and
// returns once it answers.
func Start(dir, logDir string) error {
	bin, err := exec.LookPath(Control)
	if err != nil {
		return fmt.Errorf("MPS needs NVIDIA's %s on PATH: %w", Control, err)
	}
	for _, d := range []string{dir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("MPS: %w", err)
		}
	}
	cmd := exec.Command(bin, "-d")
	cmd.Env = withDirs(os.Environ(), dir, logDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s -d: %v: %s", Control, err, strings.TrimSpace(string(out)))
	}
	for deadline := time.Now().Add(5 * time.Second); !Running(dir); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			Stop(dir) // it may answer its own client yet: not left behind
			return fmt.Errorf("%s -d started, but nothing answers in %s", Control, dir)
		}
	}
	return nil
}

// Serves checks that MPS in dir serves CUDA programs: the control daemon
// answering says nothing of the server it starts for its clients. probe, a
// command that starts CUDA as a program does (ProbeCUDA, in a process of
// its own), is run as an MPS client of dir and must succeed within
// timeout; one that hangs is killed.
func Serves(dir string, probe []string, timeout time.Duration) error {
	if len(probe) == 0 {
		return errors.New("no probe client to run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, probe[0], probe[1:]...)
	cmd.Env = withDirs(os.Environ(), dir, "")
	cmd.WaitDelay = time.Second // what it started may hold its output open
	out, err := cmd.CombinedOutput()
	msg := strings.Join(strings.Fields(strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; ")), " ")
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("a CUDA program started as its client had no answer within %v, and was killed", timeout)
	case err != nil && msg != "":
		return fmt.Errorf("a CUDA program started as its client failed: %s", msg)
	case err != nil:
		return fmt.Errorf("a CUDA program started as its client failed: %v", err)
	}
	return nil
}

// Stop asks the control daemon in dir to quit. It stops taking new
// clients and ends once those it serves are done.
func Stop(dir string) error {
	bin, err := exec.LookPath(Control)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin)
	cmd.Env = withDirs(os.Environ(), dir, "")
	cmd.Stdin = strings.NewReader("quit\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s quit: %v: %s", Control, err, strings.TrimSpace(string(out)))
	}
	for deadline := time.Now().Add(10 * time.Second); Running(dir); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("the MPS control daemon still answers 10 s after quit")
		}
	}
	return nil
}

// withDirs is env with CUDA_MPS_PIPE_DIRECTORY (and CUDA_MPS_LOG_DIRECTORY
// when logDir is given) set.
func withDirs(env []string, dir, logDir string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CUDA_MPS_PIPE_DIRECTORY=") && (logDir == "" || !strings.HasPrefix(kv, "CUDA_MPS_LOG_DIRECTORY=")) {
			out = append(out, kv)
		}
	}
	out = append(out, "CUDA_MPS_PIPE_DIRECTORY="+dir)
	if logDir != "" {
		out = append(out, "CUDA_MPS_LOG_DIRECTORY="+logDir)
	}
	return out
}

// Env is what a tenant's process needs to be confined to sm percent of a
// GPU's SMs by the control daemon in dir; nil for sm 0 (all of them).
func Env(dir string, sm uint32) []string {
	if sm == 0 {
		return nil
	}
	return []string{"CUDA_MPS_PIPE_DIRECTORY=" + dir, fmt.Sprintf("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", sm)}
}

// Need refuses an SM percentage where no control daemon answers: without
// MPS, CUDA ignores it.
func Need(dir string, sm uint32) error {
	if sm == 0 || Running(dir) {
		return nil
	}
	return fmt.Errorf("--sm %d%% confines a tenant's kernels only under MPS, and no MPS control daemon answers in %s "+
		"(start one with flexgv daemon --mps, or set CUDA_MPS_PIPE_DIRECTORY to where one runs)", sm, dir)
}
