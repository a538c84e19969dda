package remote

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/flexgv/flexgv/internal/sched"
	"github.com/flexgv/flexgv/internal/tenant"
)

// TenantDir is a folder of token files, NAME.token, read at every
// connection: writing a file admits tenant NAME's clients, removing it
// turns new ones away, with no restart of the server (connections already
// made go on). The tenant itself must exist, with its limits, in the state
// folder (the node daemon holds it): its executors run in it.
type TenantDir struct {
	Dir      string
	StateDir string
	// Env is the executor's environment for the tenant whose file is path;
	// compute: the tenant has a compute policy on one of its GPUs; sm: its
	// percentage of the SMs under MPS (0: all).
	Env func(path string, compute bool, sm uint32) []string
}

// CheckTenantDir refuses a folder someone else could add a token to.
func CheckTenantDir(dir string) error {
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	sys := st.Sys().(*syscall.Stat_t)
	switch {
	case !st.IsDir():
		return fmt.Errorf("%s is not a folder", dir)
	case sys.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("%s belongs to uid %d, not to the server's user: its owner could admit anyone", dir, sys.Uid)
	case st.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s is writable by others (mode %o): anyone could admit a tenant", dir, st.Mode().Perm())
	}
	return nil
}

// Lookup is the tenant whose token hashes to h; nil when no file has it.
// Files that are not the server's own, readable only by it, are skipped:
// they could have been planted or read. Every token is compared, in
// constant time.
func (d TenantDir) Lookup(h [sha256.Size]byte) (*Tenant, error) {
	entries, err := os.ReadDir(d.Dir)
	if err != nil {
		return nil, fmt.Errorf("the tenant folder cannot be read: %v", err)
	}
	found := ""
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".token")
		if !ok || tenant.CheckName(name) != nil || !e.Type().IsRegular() {
			continue
		}
		p := filepath.Join(d.Dir, e.Name())
		st, err := os.Lstat(p)
		if err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) || st.Mode().Perm()&0o077 != 0 {
			continue
		}
		tok, err := ReadToken(p)
		if err != nil {
			continue
		}
		th := sha256.Sum256(tok)
		if subtle.ConstantTimeCompare(h[:], th[:]) == 1 {
			found = name
		}
	}
	if found == "" {
		return nil, nil
	}
	path := tenant.Path(d.StateDir, found)
	info, err := tenant.Read(path)
	if err != nil {
		return nil, fmt.Errorf("tenant %s has a token but no tenant on the server (%v): it is created with its limits first", found, err)
	}
	compute := info.Priority != sched.PriorityNormal
	for _, dev := range info.Devices {
		compute = compute || dev.Share > 0 || dev.ComputeMax > 0
	}
	return &Tenant{Name: found, Env: d.Env(path, compute, info.SM), hash: h}, nil
}
