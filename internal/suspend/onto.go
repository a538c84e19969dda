package suspend

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/flexgv/flexgv/internal/ckpt"
	"github.com/flexgv/flexgv/internal/gpuinfo"
	"github.com/flexgv/flexgv/internal/tenant"
)

// move is flexgv resume --gpu: the tenant's processes go from the GPU of
// entry from to gpu (entry to of the tenant).
type move struct {
	gpu         gpuinfo.Device
	src         gpuinfo.Device
	from, to    int
	pairs       []ckpt.Pair // every GPU of the node: the two swapped, the others onto themselves
	back        []ckpt.Pair // the reverse, to undo
	nothingHeld bool        // no charges: nothing tells which GPU it was on
}

// resolveMove finds the GPU named dev (UUID or NVML index) and the one GPU
// the tenant's processes hold memory on.
func resolveMove(info tenant.Info, dev string) (*move, error) {
	devs, err := gpuinfo.Devices()
	if err != nil {
		return nil, fmt.Errorf("flexgv resume: cannot list the node's GPUs to find %s: %w", dev, err)
	}
	m := &move{from: -1, to: -1}
	found := false
	for _, g := range devs {
		if strings.EqualFold(g.UUID, dev) || strconv.Itoa(g.Index) == dev {
			m.gpu, found = g, true
		}
	}
	if !found {
		return nil, fmt.Errorf("flexgv resume: no GPU %s on this node (flexgv node lists them); tenant %s stays suspended", dev, info.Name)
	}
	var on []string
	for i, du := range info.Devices {
		held := false
		for _, p := range info.Procs {
			held = held || i < len(p.Used) && p.Used[i] > 0
		}
		if held {
			m.from = i
			on = append(on, du.UUID)
		}
		if du.UUID != "" && strings.EqualFold(du.UUID, m.gpu.UUID) {
			m.to = i
		}
	}
	if len(on) > 1 {
		return nil, fmt.Errorf("flexgv resume: tenant %s holds memory on %d GPUs (%s); --gpu moves a tenant on one GPU", info.Name, len(on), strings.Join(on, ", "))
	}
	if m.from < 0 {
		m.nothingHeld = true
		return m, nil
	}
	if info.Devices[m.from].UUID == "" {
		return nil, fmt.Errorf("flexgv resume: tenant %s was made without NVML, so its entries name no GPU: --gpu cannot tell which GPU it is on", info.Name)
	}
	if m.to < 0 {
		return nil, fmt.Errorf("flexgv resume: tenant %s has no entry for GPU %d (%s), so its use there could not be counted; it stays suspended", info.Name, m.gpu.Index, m.gpu.UUID)
	}
	found = false
	for _, g := range devs {
		if strings.EqualFold(g.UUID, info.Devices[m.from].UUID) {
			m.src, found = g, true
		}
	}
	if !found {
		return nil, fmt.Errorf("flexgv resume: the GPU tenant %s was on (%s) is not on this node", info.Name, info.Devices[m.from].UUID)
	}
	for _, g := range devs {
		to := g
		switch {
		case strings.EqualFold(g.UUID, m.src.UUID):
			to = m.gpu
		case strings.EqualFold(g.UUID, m.gpu.UUID):
			to = m.src
		}
		old, err := ckpt.ParseUUID(g.UUID)
		if err != nil {
			return nil, fmt.Errorf("flexgv resume: GPU %d: %w", g.Index, err)
		}
		nu, err := ckpt.ParseUUID(to.UUID)
		if err != nil {
			return nil, fmt.Errorf("flexgv resume: GPU %d: %w", to.Index, err)
		}
		m.pairs = append(m.pairs, ckpt.Pair{Old: old, New: nu})
		m.back = append(m.back, ckpt.Pair{Old: nu, New: old})
	}
	return m, nil
}

// checkRoom refuses a move where the target GPU has less free than the
// tenant's quota on the GPU it leaves (what it holds there, where it has
// no quota), or where the tenant's own quota on the target is smaller
// than what it would hold there.
func (m *move) checkRoom(info tenant.Info) error {
	if m.nothingHeld {
		return nil
	}
	src := info.Devices[m.from]
	need, what := src.Quota, fmt.Sprintf("its quota on GPU %d", m.src.Index)
	if need == 0 {
		need, what = src.Used, fmt.Sprintf("what it holds on GPU %d", m.src.Index)
	}
	if free := m.gpu.Total - min(m.gpu.Used, m.gpu.Total); free < need {
		return fmt.Errorf("flexgv resume: tenant %s stays suspended: GPU %d (%s) has %s free, the tenant needs %s (%s)", info.Name,
			m.gpu.Index, m.gpu.UUID, tenant.FormatSize(free), tenant.FormatSize(need), what)
	}
	if m.to == m.from {
		return nil
	}
	dst := info.Devices[m.to]
	if dst.Quota != 0 && dst.Used+src.Used > dst.Quota {
		return fmt.Errorf("flexgv resume: tenant %s stays suspended: its quota on GPU %d (%s) is %s, it would hold %s there", info.Name,
			m.gpu.Index, m.gpu.UUID, tenant.FormatSize(dst.Quota), tenant.FormatSize(dst.Used+src.Used))
	}
	return nil
}

func restoreOne(d *ckpt.Driver, m *move, pid int) error {
	if m == nil || m.nothingHeld {
		return d.Restore(pid)
	}
	return d.RestoreOnto(pid, m.pairs)
}

// unrestore checkpoints a process restored by a resume that failed later,
// back on the GPU it was suspended from.
func unrestore(warn io.Writer, d *ckpt.Driver, m *move, pid int) {
	err := d.Checkpoint(pid)
	if err == nil && m != nil && !m.nothingHeld && m.from != m.to {
		if err = d.RestoreOnto(pid, m.back); err == nil {
			err = d.Checkpoint(pid)
		}
	}
	if err != nil {
		fmt.Fprintf(warn, "flexgv resume: warning: undoing the restore of process %d: %v\n", pid, err)
	}
}
