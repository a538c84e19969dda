package main

import (
	"fmt"
	"strings"
)

// A field of a shared-memory struct. Type is a Go type name; cType maps it.
type field struct {
	C, Go, Type string
	Len         int // array length, 0 for a scalar
	Doc         string
}

type structSpec struct {
	C, Go, Doc string
	Fields     []field
}

// layout is one shared-memory region: its structs and constants, mirrored
// into a C header and a Go file.
type layout struct {
	CHeader, GoFile, GoPkg, Guard string
	Structs                       []structSpec
	Consts                        []constSpec
	PyFile                        string // offsets for Python readers; "" for none
}

type constSpec struct {
	C, Go string
	Value uint64
}

var layouts = []layout{
	{"include/flexgv/trace_layout_gen.h", "internal/trace/layout_gen.go", "trace", "FLEXGV_TRACE_LAYOUT_GEN_H", traceLayout, traceConsts, ""},
	{"include/flexgv/tenant_layout_gen.h", "internal/tenant/layout_gen.go", "tenant", "FLEXGV_TENANT_LAYOUT_GEN_H", tenantLayout, tenantConsts, ""},
	{"include/flexgv/sched_layout_gen.h", "internal/sched/layout_gen.go", "sched", "FLEXGV_SCHED_LAYOUT_GEN_H", schedLayout, schedConsts,
		"scripts/gpu/sched_layout_gen.py"},
}

var cTypes = map[string]string{
	"uint64": "uint64_t", "int64": "int64_t", "uint32": "uint32_t", "int32": "int32_t", "byte": "char",
}

// traceLayout is the per-run trace region: a header, then nslots slots of
// slot_size bytes, each a slot header followed by napis stats. Slot 0 takes
// the counts of processes that found every other slot taken.
var traceLayout = []structSpec{
	{"fg_trace_header", "TraceHeader", "starts the trace region; written by the CLI before the program starts", []field{
		{"magic", "Magic", "uint64", 0, "TraceMagic"},
		{"version", "Version", "uint32", 0, "TraceVersion"},
		{"napis", "NAPIs", "uint32", 0, "number of hooked entry points"},
		{"nslots", "NSlots", "uint32", 0, "process slots, slot 0 is the overflow slot"},
		{"slot_size", "SlotSize", "uint32", 0, "bytes per slot"},
		{"api_hash", "APIHash", "uint64", 0, "hash of the ordered API list"},
		{"created_ns", "CreatedNs", "uint64", 0, "CLOCK_REALTIME at creation"},
		{"next_slot", "NextSlot", "uint32", 0, "next never-used slot (atomic)"},
		{"overflowed", "Overflowed", "uint32", 0, "processes that used slot 0 (atomic)"},
	}},
	{"fg_trace_slot", "TraceSlot", "one traced process", []field{
		{"pid", "Pid", "int32", 0, ""},
		{"ppid", "Ppid", "int32", 0, ""},
		{"state", "State", "uint32", 0, "SlotRunning or SlotExited"},
		{"reserved", "Reserved", "uint32", 0, "unused: keeps vtime 8-byte aligned"},
		{"start_ns", "StartNs", "uint64", 0, "CLOCK_REALTIME"},
		{"end_ns", "EndNs", "uint64", 0, "CLOCK_REALTIME at a clean exit"},
		{"comm", "Comm", "byte", 16, "program name"},
	}},
	{"fg_api_stat", "APIStat", "counters of one entry point in one slot", []field{
		{"calls", "Calls", "uint64", 0, ""},
		{"errors", "Errors", "uint64", 0, ""},
		{"ns", "Ns", "uint64", 0, "time spent in the driver"},
		{"bytes", "Bytes", "uint64", 0, ""},
	}},
}

var traceConsts = []constSpec{
	{"FG_TRACE_MAGIC", "TraceMagic", 0x52544e5647584c46}, // "FLXGVNTR" little-endian
	{"FG_TRACE_VERSION", "TraceVersion", 1},
	{"FG_SLOT_RUNNING", "SlotRunning", 1},
	{"FG_SLOT_EXITED", "SlotExited", 2},
}

// maxDevices bounds the per-device arrays of shared regions.
const maxDevices = 16

// tenantLayout is one tenant's shared state: the quotas the CLI wrote, then
// one slot per process holding its usage per device. A tenant's usage is the
// sum over claimed slots of what each charged and what the driver's own
// count showed it holding beyond that. Liveness is an OFD lock the kernel releases when
// the holder dies, valid across PID namespaces: a process holds a write lock
// on the first byte of its slot (offset header size + index x slot size),
// and every CLI run of the tenant holds a read lock on byte
// FG_TENANT_MEMBER_LOCK for as long as its program runs. A claimed slot
// whose byte nobody locks belongs to a dead process and is reaped by
// whoever takes that lock; a file whose bytes nobody locks is removed.
var tenantLayout = []structSpec{
	{"fg_tenant_device", "Device", "one device of the tenant, keyed by GPU UUID", []field{
		{"uuid", "UUID", "byte", 48, "NVML UUID text (GPU-...); empty: the CUDA device of this entry's index"},
		{"quota", "Quota", "uint64", 0, "bytes; 0 means no limit"},
		{"ctx_measured", "CtxMeasured", "uint64", 0, "bytes one context took here, as last measured by a process (atomic)"},
		{"compute_max", "ComputeMax", "uint32", 0, "cap on the device time the tenant's kernels occupy, in hundredths of a percent; 0 means no cap"},
		{"compute_share", "ComputeShare", "uint32", 0, "share of the device's time guaranteed under contention, in hundredths of a percent; 0 means none"},
		{"refused", "Refused", "uint64", 0, "allocations refused for the quota since the tenant was created (atomic); kept in the header so that no process's exit takes its count away"},
	}},
	{"fg_tenant_header", "Header", "starts a tenant file; written once by the CLI that creates it", []field{
		{"magic", "Magic", "uint64", 0, "TenantMagic"},
		{"version", "Version", "uint32", 0, "TenantVersion"},
		{"ndevices", "NDevices", "uint32", 0, "device entries in use"},
		{"nslots", "NSlots", "uint32", 0, "process slots"},
		{"slot_hwm", "SlotHWM", "uint32", 0, "slots ever claimed are below this (atomic max): sums stop here"},
		{"created_ns", "CreatedNs", "uint64", 0, "CLOCK_REALTIME at creation"},
		{"ctx_bytes", "CtxBytes", "uint64", 0, "device memory charged per context when it cannot be measured"},
		{"owner_uid", "OwnerUID", "uint32", 0, "user that created the tenant"},
		{"priority", "Priority", "uint32", 0, "PriorityLow to PriorityHigh; higher runs first"},
		{"sm", "SM", "uint32", 0, "percentage of a GPU's SMs its processes' kernels may use under MPS (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE); 0 means all"},
		{"reserved", "Reserved", "uint32", 0, "unused: keeps vtime 8-byte aligned"},
		{"name", "Name", "byte", 64, "tenant name"},
		{"devices", "Devices", "Device", maxDevices, ""},
	}},
	{"fg_tenant_slot", "Slot", "one process of the tenant", []field{
		{"state", "State", "uint32", 0, "SlotFree or SlotClaimed (atomic)"},
		{"pid", "Pid", "int32", 0, "the claimer's pid in its own PID namespace"},
		{"nvml_pid", "NvmlPid", "uint32", 0, "its pid as NVML reports it, once learnt (0: not yet; atomic)"},
		{"suspended", "Suspended", "uint32", 0, "1 while flexgv suspend holds the process checkpointed (atomic; 0 at each claim)"},
		{"claimed_ns", "ClaimedNs", "uint64", 0, "CLOCK_REALTIME at claim"},
		{"used", "Used", "uint64", maxDevices, "bytes held per device entry"},
		{"unmodelled", "Unmodelled", "uint64", maxDevices, "bytes the driver's own count (NVML) showed it holding beyond used, when last read (atomic); its usage is used plus this"},
		{"moved", "Moved", "byte", maxDevices, "per device entry, the entry it is counted on since flexgv resume --gpu moved the process (entry + 1; 0: its own; atomic)"},
	}},
}

var tenantConsts = []constSpec{
	{"FG_TENANT_MAGIC", "TenantMagic", 0x544e4e5447584c46}, // "FLXGTNNT" little-endian
	{"FG_TENANT_VERSION", "TenantVersion", 10},
	{"FG_MAX_DEVICES", "MaxDevices", maxDevices},
	{"FG_TENANT_SLOT_FREE", "SlotFree", 0},
	{"FG_TENANT_SLOT_CLAIMED", "SlotClaimed", 1},
	{"FG_TENANT_MEMBER_LOCK", "MemberLock", 0},
	{"FG_TENANT_MAX_SLOTS", "MaxSlots", 4096},
}

// schedLayout is one GPU's scheduler region (file gpu-UUID in the state
// folder), shared by every process of every tenant with a compute policy
// on that GPU. One process at a time, the holder, may launch work (and
// beside it its tenant's other processes, uncapped); it
// hands the GPU over at the end of its quantum to the waiting process of
// highest priority whose tenant has the smallest virtual time (GPU time
// held over its share), at once to a higher priority. Liveness: the CLI
// runs (or the daemon) of a tenant hold a read lock on the first byte of
// its tenant entry, and a process holds a write lock on the first byte of
// its slot; FG_SCHED_ADMIN_LOCK is taken (write, blocking) to create the
// region and to add or remove tenant entries. Times are CLOCK_MONOTONIC.
var schedLayout = []structSpec{
	{"fg_sched_tenant", "Tenant", "one tenant on the GPU", []field{
		{"name", "Name", "byte", 64, "tenant name; empty: free"},
		{"share", "Share", "uint32", 0, "guaranteed share, hundredths of a percent; 0: an even part of what no share claims"},
		{"cap", "Cap", "uint32", 0, "hard cap, hundredths of a percent; 0: none"},
		{"priority", "Priority", "uint32", 0, "as the tenant file's"},
		{"host_bound", "HostBound", "uint32", 0, "of its requests' time (a first launch to the synchronization that ends it), the part not spent waiting for the GPU, hundredths of a percent: a moving average its MPS clients keep (atomic); 0: not measured"},
		{"last_slot", "LastSlot", "uint32", 0, "slot + 1 of its process whose turn began last: under a cap, where its processes take turns, the next is the first waiting after it (atomic)"},
		{"reserved", "Reserved", "uint32", 0, "unused: keeps vtime 8-byte aligned"},
		{"vtime", "VTime", "uint64", 0, "GPU time held over the share's weight, ns (atomic)"},
		{"held_ns", "HeldNs", "uint64", 0, "GPU time held since the entry was made, and under MPS what its work ran beside the holder, ns (atomic)"},
		{"waited_ns", "WaitedNs", "uint64", 0, "time its processes waited to launch, ns (atomic)"},
		{"preemptions", "Preemptions", "uint64", 0, "times it gave the GPU up early to a higher priority (atomic)"},
		{"cap_credit", "CapCredit", "int64", 0, "GPU time the cap still allows, ns (atomic)"},
		{"cap_refilled", "CapRefilled", "uint64", 0, "when cap_credit was last earned"},
		{"turn_ended_ns", "TurnEndedNs", "uint64", 0, "CLOCK_MONOTONIC until which its last turn was paid: its processes' work that ran on past it into another tenant's is theirs to pay (atomic)"},
		{"beside_off_ns", "BesideOffNs", "uint64", 0, "CLOCK_MONOTONIC until which lower priorities do not run beside its MPS clients: they slowed its requests (atomic)"},
	}},
	{"fg_sched_header", "Header", "starts a GPU's scheduler region; written once by whoever creates it", []field{
		{"magic", "Magic", "uint64", 0, "SchedMagic"},
		{"version", "Version", "uint32", 0, "SchedVersion"},
		{"quantum_us", "QuantumUs", "uint32", 0, "a holder's quantum under contention"},
		{"uuid", "UUID", "byte", 48, "the GPU"},
		{"created_ns", "CreatedNs", "uint64", 0, "CLOCK_REALTIME at creation"},
		{"present", "Present", "uint64", schedWords, "bit i%64 of word i/64: slot i is claimed (atomic; a dead process's bit lingers until someone sees its lock gone)"},
		{"waiting", "Waiting", "uint64", schedWords, "bit i%64 of word i/64: slot i waits for the GPU (atomic)"},
		{"holder", "Holder", "uint32", 0, "slot index + 1 of the holder; 0: none (atomic)"},
		{"gen", "Gen", "uint32", 0, "bumped at every hand-over; waiters sleep on it (futex)"},
		{"since_ns", "SinceNs", "uint64", 0, "CLOCK_MONOTONIC from which the holder's time is not yet charged, never moved back (each interval paid once); ahead of now while the last holder's work left running, which it paid for, runs"},
		{"vclock", "VClock", "uint64", 0, "virtual time of the last hand-over: newcomers start there"},
		{"switches", "Switches", "uint64", 0, "hand-overs so far (atomic)"},
		{"turn_ends_ns", "TurnEndsNs", "uint64", 0, "CLOCK_MONOTONIC when the holder's quantum ends, as it keeps it: a gang's ranks on other GPUs stop launching there (atomic)"},
		{"tenants", "Tenants", "Tenant", schedTenants, ""},
	}},
	{"fg_sched_slot", "Slot", "one process on the GPU", []field{
		{"state", "State", "uint32", 0, "SlotFree or SlotClaimed (atomic)"},
		{"pid", "Pid", "int32", 0, "the claimer's pid in its own PID namespace (display only)"},
		{"tenant", "Tenant", "uint32", 0, "index of its tenant entry"},
		{"inflight", "Inflight", "uint32", 0, "launches it has seen in flight and not complete (atomic)"},
		{"mps", "MPS", "uint32", 0, "1: its contexts on the GPU are MPS clients, whose kernels run beside other clients' (atomic)"},
		{"paused", "Paused", "uint32", 0, "its launch count + 1 (low 32 bits) when, holding the GPU, it synchronized with nothing in flight and its pauses there tend to be long (a server between requests): until it launches again an equal may take the GPU at once (atomic)"},
		{"launches", "Launches", "uint64", 0, "launches so far, written by its process only"},
		{"claimed_ns", "ClaimedNs", "uint64", 0, "CLOCK_REALTIME at claim"},
	}},
}

// schedTenants and schedSlots bound one GPU's scheduled tenants and
// processes (a bit per slot in the header's masks, of schedWords words):
// a tenant per GiB of an H200, and two processes each.
const (
	schedTenants = 128
	schedSlots   = 256
	schedWords   = schedSlots / 64
)

var schedConsts = []constSpec{
	{"FG_SCHED_MAGIC", "SchedMagic", 0x444843535847584c}, // "LXGVSCHD" little-endian
	{"FG_SCHED_VERSION", "SchedVersion", 6},
	{"FG_SCHED_TENANTS", "MaxTenants", schedTenants},
	{"FG_SCHED_SLOTS", "MaxSlots", schedSlots},
	{"FG_SCHED_WORDS", "MaskWords", schedWords},
	{"FG_SCHED_SLOT_FREE", "SlotFree", 0},
	{"FG_SCHED_SLOT_CLAIMED", "SlotClaimed", 1},
	{"FG_SCHED_ADMIN_LOCK", "AdminLock", 0},
	{"FG_PRIORITY_LOW", "PriorityLow", 1},
	{"FG_PRIORITY_NORMAL", "PriorityNormal", 4},
	{"FG_PRIORITY_HIGH", "PriorityHigh", 7},
	{"FG_PRIORITY_MAX", "PriorityMax", 9},
	// the longest a tenant keeps lower priorities from running beside it
	// (beside_off_ns): a time further ahead is garbage, to shim and readers
	{"FG_BESIDE_OFF_MAX_NS", "BesideOffMaxNs", 600_000_000_000},
}

func emitLayoutC(l layout) string {
	var b strings.Builder
	b.WriteString("/* Code generated by tools/gen (layout.go). DO NOT EDIT. */\n")
	fmt.Fprintf(&b, "#ifndef %s\n#define %s\n\n#include <stdint.h>\n\n", l.Guard, l.Guard)
	for _, c := range l.Consts {
		fmt.Fprintf(&b, "#define %s 0x%xULL\n", c.C, c.Value)
	}
	for _, s := range l.Structs {
		fmt.Fprintf(&b, "\n/* %s */\nstruct %s {\n", s.Doc, s.C)
		for _, f := range s.Fields {
			arr := ""
			if f.Len > 0 {
				arr = fmt.Sprintf("[%d]", f.Len)
			}
			ct, ok := cTypes[f.Type]
			if !ok {
				ct = "struct " + structC(l, f.Type)
			}
			fmt.Fprintf(&b, "    %s %s%s;\n", ct, f.C, arr)
		}
		b.WriteString("};\n")
	}
	b.WriteString("\n#endif\n")
	return b.String()
}

// structC is the C name of the struct whose Go name is goName.
func structC(l layout, goName string) string {
	for _, s := range l.Structs {
		if s.Go == goName {
			return s.C
		}
	}
	panic("layout: unknown type " + goName)
}

func emitLayoutGo(l layout) string {
	var b strings.Builder
	fmt.Fprintf(&b, "// Code generated by tools/gen (layout.go). DO NOT EDIT.\n\npackage %s\n\n", l.GoPkg)
	b.WriteString("// Constants of the region shared with the shim.\nconst (\n")
	for _, c := range l.Consts {
		fmt.Fprintf(&b, "\t%s = 0x%x\n", c.Go, c.Value)
	}
	b.WriteString(")\n")
	for _, s := range l.Structs {
		fmt.Fprintf(&b, "\n// %s mirrors struct %s: %s.\ntype %s struct {\n", s.Go, s.C, s.Doc, s.Go)
		for _, f := range s.Fields {
			t := f.Type
			if f.Len > 0 {
				t = fmt.Sprintf("[%d]%s", f.Len, t)
			}
			fmt.Fprintf(&b, "\t%s %s `c:\"%s\"`\n", f.Go, t, f.C)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// pyFormats are the struct module's codes of the scalar types.
var pyFormats = map[string]string{"uint64": "Q", "int64": "q", "uint32": "I", "int32": "i", "byte": "s"}

// sizeAlign is a type's size and alignment in C (natural alignment, as
// the compilers of the C and Go sides lay the structs out).
func sizeAlign(l layout, typ string) (int, int) {
	switch typ {
	case "uint64", "int64":
		return 8, 8
	case "uint32", "int32":
		return 4, 4
	case "byte":
		return 1, 1
	}
	for _, s := range l.Structs {
		if s.Go == typ {
			_, size, align := fieldOffsets(l, s)
			return size, align
		}
	}
	panic("layout: unknown type " + typ)
}

// fieldOffsets are the offsets of s's fields, its size and alignment.
func fieldOffsets(l layout, s structSpec) (offs []int, size, align int) {
	align = 1
	for _, f := range s.Fields {
		n, a := sizeAlign(l, f.Type)
		size = (size + a - 1) / a * a
		offs = append(offs, size)
		size += n * max(f.Len, 1)
		align = max(align, a)
	}
	return offs, (size + align - 1) / align * align, align
}

// emitLayoutPy gives Python readers (scripts/gpu) each struct's size and
// each field's offset and struct-module format, from the same spec.
func emitLayoutPy(l layout) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\"\"\"Code generated by tools/gen (layout.go). DO NOT EDIT.\n\nThe layout of %s for Python readers:\n"+
		"each struct's SIZE, and each field's (offset, struct-module format).\"\"\"\n\n", l.CHeader)
	for _, c := range l.Consts {
		fmt.Fprintf(&b, "%s = 0x%x\n", strings.TrimPrefix(c.C, "FG_"), c.Value)
	}
	for _, s := range l.Structs {
		offs, size, _ := fieldOffsets(l, s)
		fmt.Fprintf(&b, "\n# struct %s: %s\n%s = {\n    \"SIZE\": %d,\n", s.C, s.Doc, strings.ToUpper(strings.TrimPrefix(s.C, "fg_")), size)
		for i, f := range s.Fields {
			start := offs[i]
			format, scalar := pyFormats[f.Type]
			switch {
			case scalar && f.Type == "byte":
				format = fmt.Sprintf("%ds", max(f.Len, 1))
			case scalar && f.Len > 0:
				format = fmt.Sprintf("%d%s", f.Len, format)
			case !scalar: // an array of a struct of its own, given below or above
				fmt.Fprintf(&b, "    \"%s\": (%d, None),\n", f.C, start)
				continue
			}
			fmt.Fprintf(&b, "    \"%s\": (%d, \"<%s\"),\n", f.C, start, format)
		}
		b.WriteString("}\n")
	}
	return b.String()
}
