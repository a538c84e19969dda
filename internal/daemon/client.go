package daemon

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/local"
	"google.golang.org/grpc/status"

	"github.com/flexgv/flexgv/internal/tenant"
	flexgvv1 "github.com/flexgv/flexgv/proto/flexgv/v1"
)

// Socket is where the daemon of the tenants in stateDir listens unless
// told otherwise, and where flexgv run and ps look for it.
func Socket(stateDir string) string { return filepath.Join(stateDir, "daemon.sock") }

// CallTimeout bounds a CLI's call to the daemon: none takes more than a
// few file operations.
const CallTimeout = 10 * time.Second

// Client is a connection to a daemon's API.
type Client struct {
	flexgvv1.DaemonClient
	conn *grpc.ClientConn
}

// Connect returns a client of the daemon on socket, or nil when no daemon
// of this user's can be there: no socket, or one that neither this user
// nor root made (every user may create files in the state folder). It
// connects at the first call, which fails as Absent if nothing answers.
func Connect(socket string) (*Client, error) {
	st, err := os.Lstat(socket)
	if err != nil || st.Mode()&fs.ModeSocket == 0 {
		return nil, nil
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; uid != 0 && uid != uint32(os.Geteuid()) {
		return nil, nil
	}
	abs, err := filepath.Abs(socket)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(local.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &Client{flexgvv1.NewDaemonClient(conn), conn}, nil
}

// Close ends the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Absent reports whether a call failed because no daemon answered: the
// socket is one a dead daemon left, or its daemon serves another user.
func Absent(err error) bool { return status.Code(err) == codes.Unavailable }

// Message is a daemon's error as a CLI shows it: the text without the code.
func Message(err error) string { return status.Convert(err).Message() }

// Info is a tenant as the API reports it, in the form flexgv ps shows.
func Info(t *flexgvv1.Tenant) tenant.Info {
	info := tenant.Info{
		Name: t.Name, OwnerUID: t.OwnerUid, Created: time.Unix(0, t.CreatedUnixNano), Priority: t.Priority, SM: t.Sm,
		Devices: make([]tenant.DeviceUse, len(t.Devices)), Procs: make([]tenant.Proc, len(t.Processes)),
		Labels: t.Labels,
	}
	for i, d := range t.Devices {
		info.Devices[i] = tenant.DeviceUse{Index: int(d.Index), UUID: d.Uuid, Quota: d.QuotaBytes, Used: d.UsedBytes,
			CtxMeasured: d.ContextBytes, ComputeMax: d.ComputeMax, Share: d.ComputeShare, Refused: d.Refused}
	}
	for i, p := range t.Processes {
		info.Procs[i] = tenant.Proc{Pid: int(p.Pid), Used: p.UsedBytes, Suspended: p.Suspended}
	}
	return info
}

// Quotas are a tenant's device entries, to join it with.
func Quotas(t *flexgvv1.Tenant) []tenant.DeviceQuota {
	devs := make([]tenant.DeviceQuota, len(t.Devices))
	for i, d := range t.Devices {
		devs[i] = tenant.DeviceQuota{UUID: d.Uuid, Quota: d.QuotaBytes, ComputeMax: d.ComputeMax, ComputeShare: d.ComputeShare}
	}
	return devs
}
