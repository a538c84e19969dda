// Package vgpu owns how FlexGV's virtual GPUs appear in Kubernetes: the
// extended resources a pod asks for, the annotations that carry a node's
// GPUs and a pod's placement, and which GPU has room for which pod. The
// scheduler extender, the device plugin and the admission webhook all
// decide through it, so they cannot drift apart.
package vgpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/flexgv/flexgv/internal/sched"
)

// What a pod asks for, per container, as extended resources (limits).
const (
	// ResourceVGPU is a number of virtual GPUs, each on its own GPU.
	ResourceVGPU corev1.ResourceName = "flexgv.io/vgpu"
	// ResourceMemory is the device memory each vGPU may use, in MiB; the
	// CUDA context it creates comes on top.
	ResourceMemory corev1.ResourceName = "flexgv.io/gpu-memory"
	// ResourceCompute is the share of its GPU's time guaranteed to each
	// vGPU while others contend, in percent (flexgv run --compute); time
	// others leave idle is lent. Absent: none reserved.
	ResourceCompute corev1.ResourceName = "flexgv.io/gpu-compute"
	// ResourceRemoteVGPU is a virtual GPU on a GPU server node, reached
	// over the network (flexgv serve): any node with slots of it runs the
	// pod. Its memory and share are annotations (AnnotationRemoteMemory,
	// AnnotationRemoteCompute): they are the server's, not the node's.
	ResourceRemoteVGPU corev1.ResourceName = "flexgv.io/remote-vgpu"
)

// Annotations.
const (
	// AnnotationPriority on a pod: low, normal (the default) or high.
	AnnotationPriority = "flexgv.io/priority"
	// AnnotationComputeMax on a pod: a cap on the share of its GPU's time
	// each vGPU takes, even when the GPU is idle, in percent (flexgv run
	// --compute-max). An annotation, not a resource: a cap reserves nothing.
	AnnotationComputeMax = "flexgv.io/gpu-compute-max"
	// AnnotationSM on a pod: the percentage of each of its GPUs' SMs its
	// kernels may use, from 1 to 100 (flexgv run --sm). It makes the
	// container a client of the node daemon's MPS, which the daemon must
	// offer to pods (flexgv daemon --mps --mps-pods).
	AnnotationSM = "flexgv.io/gpu-sm"
	// AnnotationGPUs on a pod: the UUIDs of the GPUs it was placed on,
	// comma-separated, written with its binding by the scheduler extender.
	AnnotationGPUs = "flexgv.io/gpus"
	// AnnotationBoundAt on a pod: when the extender bound it (RFC 3339,
	// nanoseconds). A kubelet admits pods in the order their bindings reach
	// it; the device plugin tells which pod an allocation is for by it.
	AnnotationBoundAt = "flexgv.io/bound-at"
	// AnnotationInventory on a node: its GPUs as JSON (Inventory), written
	// by its device plugin.
	AnnotationInventory = "flexgv.io/inventory"
	// AnnotationRemoteMemory and AnnotationRemoteCompute on a pod with a
	// remote vGPU: its device memory (MiB) and guaranteed share (percent).
	AnnotationRemoteMemory  = "flexgv.io/remote-gpu-memory"
	AnnotationRemoteCompute = "flexgv.io/remote-gpu-compute"
	// AnnotationRemoteGPU on a pod: NODE/UUID, the server node and GPU the
	// extender placed its remote vGPU on, written with its binding.
	AnnotationRemoteGPU = "flexgv.io/remote-gpu"
)

// Priority is how a tenant's work is ordered against others' on a GPU:
// low, normal, high, or 0 to 9 (higher runs first), as flexgv run
// --priority takes it.
type Priority string

// The named priorities.
const (
	Low    Priority = "low"
	Normal Priority = "normal"
	High   Priority = "high"
)

// ParsePriority reads a pod's priority annotation; empty is Normal.
func ParsePriority(s string) (Priority, error) {
	if s == "" {
		return Normal, nil
	}
	if _, err := sched.ParsePriority(s); err != nil || s != strings.ToLower(s) {
		return "", fmt.Errorf("%s %q is not a priority; use low, normal, high or a number from 0 to %d (higher runs first)", AnnotationPriority, s, sched.PriorityMax)
	}
	return Priority(s), nil
}

// Request is what one pod asks of FlexGV.
type Request struct {
	Container  string   // the container that gets the vGPUs
	Count      int      // vGPUs, each on a different GPU
	MemoryMiB  int64    // per vGPU
	ComputePct int64    // guaranteed share per vGPU; 0: none
	ComputeMax int64    // cap per vGPU, percent; 0: none
	SM         int64    // percentage of each GPU's SMs, under the node's MPS; 0: all, without MPS
	Priority   Priority // of its tenant
	Remote     bool     // a remote vGPU (Count 1), on a GPU server node
}

// MaxMemoryMiB bounds a vGPU's memory (1 EiB, beyond any GPU): sums of
// requests then stay far from overflowing.
const MaxMemoryMiB = 1 << 40

// PodRequest reads what pod asks for; ok is false when it asks for no
// vGPU. A request that cannot be honoured is an error saying why: the
// admission webhook shows it to whoever creates the pod.
func PodRequest(pod *corev1.Pod) (r Request, ok bool, err error) {
	prio, err := ParsePriority(pod.Annotations[AnnotationPriority])
	if err != nil {
		return Request{}, false, err
	}
	const percent = "give a percentage from 1 to 100 (per vGPU)"
	capPct, _, err := annotationNumber(pod.Annotations, AnnotationComputeMax, 1, 100, percent)
	if err != nil {
		return Request{}, false, err
	}
	sm, _, err := annotationNumber(pod.Annotations, AnnotationSM, 1, 100, percent)
	if err != nil {
		return Request{}, false, err
	}
	for _, c := range pod.Spec.InitContainers {
		if asks(c) {
			return Request{}, false, fmt.Errorf("init container %s asks for flexgv.io resources; only regular containers can have vGPUs", c.Name)
		}
	}
	for _, c := range pod.Spec.Containers {
		if !asks(c) {
			continue
		}
		if ok {
			return Request{}, false, fmt.Errorf("containers %s and %s both ask for flexgv.io resources; give vGPUs to one container per pod", r.Container, c.Name)
		}
		if r, err = containerRequest(c, pod.Annotations); err != nil {
			return Request{}, false, err
		}
		r.Priority, r.ComputeMax, r.SM, ok = prio, capPct, sm, true
	}
	if ok && r.Remote && r.SM > 0 {
		return Request{}, false, fmt.Errorf("%s is for the node's own GPUs, under its MPS; a remote vGPU runs on the server's", AnnotationSM)
	}
	// An MPS control daemon runs one server at a time, for one user: a
	// client of another user waits until the server's clients are all gone.
	if ok && r.SM > 0 && runsAsNonRoot(pod, r.Container) {
		return Request{}, false, fmt.Errorf("%s: container %s runs as a user other than root, and the node's MPS server runs as root, serving one user at a time: "+
			"its CUDA calls would wait until no root pod uses the GPU; run it as root or leave %s out", AnnotationSM, r.Container, AnnotationSM)
	}
	for _, a := range []string{AnnotationPriority, AnnotationComputeMax, AnnotationSM} {
		if !ok && pod.Annotations[a] != "" {
			return Request{}, false, fmt.Errorf("%s is set but no container asks for %s", a, ResourceVGPU)
		}
	}
	if err := preemption(pod.Annotations, r, ok); err != nil {
		return Request{}, false, err
	}
	if ok && r.ComputeMax > 0 && r.ComputePct > r.ComputeMax {
		return Request{}, false, fmt.Errorf("container %s: %s %d is above the cap %s %d: a share cannot be guaranteed past its cap",
			r.Container, ResourceCompute, r.ComputePct, AnnotationComputeMax, r.ComputeMax)
	}
	return r, ok, nil
}

func asks(c corev1.Container) bool {
	for _, n := range []corev1.ResourceName{ResourceVGPU, ResourceMemory, ResourceCompute, ResourceRemoteVGPU} {
		if _, ok := c.Resources.Limits[n]; ok {
			return true
		}
		if _, ok := c.Resources.Requests[n]; ok {
			return true
		}
	}
	return false
}

func containerRequest(c corev1.Container, annotations map[string]string) (Request, error) {
	r := Request{Container: c.Name}
	get := func(n corev1.ResourceName) (int64, bool, error) {
		q, ok := c.Resources.Limits[n]
		if !ok {
			// Extended resources default their limit to the request.
			q, ok = c.Resources.Requests[n]
		}
		if !ok {
			return 0, false, nil
		}
		v, exact := q.AsInt64()
		if !exact || q.Cmp(*resource.NewQuantity(v, q.Format)) != 0 {
			return 0, true, fmt.Errorf("container %s: %s %s is not a whole number", c.Name, n, q.String())
		}
		return v, true, nil
	}
	remote, hasRemote, err := get(ResourceRemoteVGPU)
	if err != nil {
		return r, err
	}
	if hasRemote {
		return remoteRequest(c, r, remote, annotations)
	}
	count, hasCount, err := get(ResourceVGPU)
	if err != nil {
		return r, err
	}
	mem, hasMem, err := get(ResourceMemory)
	if err != nil {
		return r, err
	}
	compute, hasCompute, err := get(ResourceCompute)
	if err != nil {
		return r, err
	}
	switch {
	case !hasMem && !hasCompute && count == 0:
		return r, fmt.Errorf("container %s: %s 0 asks for nothing; leave it out", c.Name, ResourceVGPU)
	case !hasCount || count == 0:
		missing := ResourceMemory
		if !hasMem {
			missing = ResourceCompute
		}
		return r, fmt.Errorf("container %s asks for %s without %s; add %s: 1", c.Name, missing, ResourceVGPU, ResourceVGPU)
	case count < 0:
		return r, fmt.Errorf("container %s: %s %d is negative", c.Name, ResourceVGPU, count)
	case !hasMem || mem <= 0:
		return r, fmt.Errorf("container %s asks for %s without %s; give the MiB of device memory each vGPU may use", c.Name, ResourceVGPU, ResourceMemory)
	case mem > MaxMemoryMiB:
		return r, fmt.Errorf("container %s: %s %d MiB is more than any GPU has", c.Name, ResourceMemory, mem)
	case hasCompute && (compute <= 0 || compute > 100):
		return r, fmt.Errorf("container %s: %s %d is not a share of one GPU; give a percentage from 1 to 100 (per vGPU), or none", c.Name, ResourceCompute, compute)
	}
	r.Count, r.MemoryMiB, r.ComputePct = int(count), mem, compute
	return r, nil
}

// remoteRequest reads a container's remote vGPU: one, with its memory and
// share in the pod's annotations, and no local vGPU resources beside it.
// annotationNumber reads annotation a as a whole number from lo to hi;
// set is false when it is absent. A bad value is an error that names it and
// says what is wanted.
func annotationNumber(annotations map[string]string, a string, lo, hi int64, want string) (n int64, set bool, err error) {
	v, set := annotations[a]
	if !set {
		return 0, false, nil
	}
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || fmt.Sprint(n) != v || n < lo || n > hi {
		return 0, true, fmt.Errorf("%s %q: %s", a, v, want)
	}
	return n, true, nil
}

func remoteRequest(c corev1.Container, r Request, count int64, annotations map[string]string) (Request, error) {
	for _, n := range []corev1.ResourceName{ResourceVGPU, ResourceMemory, ResourceCompute} {
		if _, ok := c.Resources.Limits[n]; ok {
			return r, fmt.Errorf("container %s asks for %s and %s: a remote vGPU's memory and share are the annotations %s and %s",
				c.Name, ResourceRemoteVGPU, n, AnnotationRemoteMemory, AnnotationRemoteCompute)
		}
	}
	if count != 1 {
		return r, fmt.Errorf("container %s: %s %d: one remote vGPU per container", c.Name, ResourceRemoteVGPU, count)
	}
	num := func(a string, lo, hi int64) (int64, bool, error) {
		return annotationNumber(annotations, a, lo, hi, fmt.Sprintf("want a whole number from %d to %d", lo, hi))
	}
	mem, ok, err := num(AnnotationRemoteMemory, 1, MaxMemoryMiB)
	if err != nil {
		return r, err
	}
	if !ok {
		return r, fmt.Errorf("container %s asks for %s without %s: give the MiB of device memory it may use", c.Name, ResourceRemoteVGPU, AnnotationRemoteMemory)
	}
	compute, _, err := num(AnnotationRemoteCompute, 1, 100)
	if err != nil {
		return r, err
	}
	r.Count, r.MemoryMiB, r.ComputePct, r.Remote = 1, mem, compute, true
	return r, nil
}

// PodRemoteGPU reads where a pod's remote vGPU is: the server node and
// the GPU's UUID it was placed on, or moved to since (move.go); ok is
// false when it has none.
func PodRemoteGPU(pod *corev1.Pod) (node, uuid string, ok bool) {
	if c := PodCondition(pod, ConditionMoved); c != nil && c.Status == corev1.ConditionTrue {
		if node, uuid, ok = nodeGPU(c.Message); ok {
			return node, uuid, true
		}
	}
	return nodeGPU(pod.Annotations[AnnotationRemoteGPU])
}

// nodeGPU reads NODE/UUID.
func nodeGPU(s string) (node, uuid string, ok bool) {
	node, uuid, ok = strings.Cut(s, "/")
	return node, uuid, ok && node != "" && uuid != "" && !strings.Contains(uuid, "/")
}

// Inventory is a node's GPUs as its device plugin publishes them.
type Inventory struct {
	// Slots is how many vGPUs one GPU can hold at most.
	Slots int `json:"slots"`
	// ContextMiB is what one CUDA context takes on these GPUs; every pod
	// is charged one per GPU on top of its memory.
	ContextMiB int64 `json:"contextMiB"`
	GPUs       []GPU `json:"gpus"`
	// Remote is the address (flexgv serve) where this node serves its GPUs
	// to remote vGPUs; "": it does not.
	Remote string `json:"remote,omitempty"`
	// MPS: the node's daemon offers its MPS to pods, which AnnotationSM
	// needs.
	MPS bool `json:"mps,omitempty"`
	// Suspend: the node suspends pods that allow it instead of their
	// eviction (suspend.go).
	Suspend bool `json:"suspend,omitempty"`
}

// GPU is one physical GPU of a node.
type GPU struct {
	UUID      string `json:"uuid"`
	Index     int    `json:"index"`
	Minor     int    `json:"minor"` // device node /dev/nvidiaMinor
	MemoryMiB int64  `json:"memoryMiB"`
	Healthy   bool   `json:"healthy"`
}

// Encode is the inventory's annotation value.
func (inv Inventory) Encode() string {
	b, _ := json.Marshal(inv)
	return string(b)
}

// NodeInventory reads node's inventory; ok is false when it has none.
func NodeInventory(node *corev1.Node) (inv Inventory, ok bool, err error) {
	s, ok := node.Annotations[AnnotationInventory]
	if !ok {
		return Inventory{}, false, nil
	}
	if err := json.Unmarshal([]byte(s), &inv); err != nil {
		return Inventory{}, true, fmt.Errorf("node %s: annotation %s: %w", node.Name, AnnotationInventory, err)
	}
	bad := func(format string, a ...any) (Inventory, bool, error) {
		return Inventory{}, true, fmt.Errorf("node %s: annotation %s: %s", node.Name, AnnotationInventory, fmt.Sprintf(format, a...))
	}
	if inv.Slots < 1 {
		return bad("slots %d", inv.Slots)
	}
	if inv.ContextMiB < 0 || inv.ContextMiB > MaxMemoryMiB {
		return bad("context %d MiB", inv.ContextMiB)
	}
	seen := map[string]bool{}
	for _, g := range inv.GPUs {
		// A GPU counted twice, or one of no size, would let pods in that
		// do not fit; one past any GPU's size, sums that overflow.
		if g.UUID == "" || seen[g.UUID] || g.MemoryMiB <= 0 || g.MemoryMiB > MaxMemoryMiB {
			return bad("GPU %q of %d MiB (listed before: %v)", g.UUID, g.MemoryMiB, seen[g.UUID])
		}
		seen[g.UUID] = true
	}
	return inv, true, nil
}

// PodGPUs reads the GPUs a pod was placed on.
func PodGPUs(pod *corev1.Pod) []string {
	s := pod.Annotations[AnnotationGPUs]
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Use is what pods hold of one GPU.
type Use struct {
	Pods       int
	MemoryMiB  int64 // with their contexts
	ComputePct int64
}

// Add charges one vGPU of r, with its context.
func (u *Use) Add(r Request, ctxMiB int64) {
	u.Pods++
	u.MemoryMiB += r.MemoryMiB + ctxMiB
	u.ComputePct += r.ComputePct
}

// Policy is how the GPUs for a pod are chosen among those with room.
type Policy string

// Placement policies.
const (
	// Binpack fills the fullest GPUs first, keeping others free for large pods.
	Binpack Policy = "binpack"
	// Spread puts pods on the emptiest GPUs, for the least contention.
	Spread Policy = "spread"
)

// ParsePolicy reads a placement policy.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case Binpack, Spread:
		return p, nil
	}
	return "", fmt.Errorf("placement policy %q: use binpack or spread", s)
}

// ErrNoRoom is wrapped by Choose's error when no set of GPUs fits.
var ErrNoRoom = errors.New("no room")

type candidate struct {
	uuid      string
	freeAfter float64 // the share of the GPU left free once the pod is there
}

// Choose picks r.Count GPUs of inv with room for one vGPU of r each, given
// what used holds per GPU UUID; score is 0..1, higher where policy likes the
// node better. Without room, the error says what each GPU has free.
func Choose(inv Inventory, used map[string]Use, r Request, policy Policy) (uuids []string, score float64, err error) {
	if r.SM > 0 && !inv.MPS {
		return nil, 0, fmt.Errorf("%w: flexgv: the pod asks for part of the SMs (%s), and the node offers pods no MPS", ErrNoRoom, AnnotationSM)
	}
	var fits []candidate
	// Said with "percent", not "%": kube-scheduler's events take the
	// message as a format string.
	var why []string
	need := r.MemoryMiB + inv.ContextMiB
	for _, g := range inv.GPUs {
		u := used[g.UUID]
		freeMem, freeCompute := g.MemoryMiB-u.MemoryMiB, 100-u.ComputePct
		switch {
		case !g.Healthy:
			why = append(why, g.UUID+" unhealthy")
		case u.Pods >= inv.Slots:
			why = append(why, fmt.Sprintf("%s all %d vGPUs taken", g.UUID, inv.Slots))
		case freeMem < need || freeCompute < r.ComputePct:
			why = append(why, fmt.Sprintf("%s has %d MiB, %d percent compute", g.UUID, max(freeMem, 0), max(freeCompute, 0)))
		default:
			memLeft := float64(freeMem-need) / float64(g.MemoryMiB)
			computeLeft := float64(freeCompute-r.ComputePct) / 100
			fits = append(fits, candidate{g.UUID, (memLeft + computeLeft) / 2})
		}
	}
	if len(fits) < r.Count {
		what := fmt.Sprintf("%d MiB (+%d MiB context)", r.MemoryMiB, inv.ContextMiB)
		if r.ComputePct > 0 {
			what += fmt.Sprintf(" and %d percent compute", r.ComputePct)
		}
		gpus := "GPU"
		if r.Count > 1 {
			gpus = fmt.Sprintf("%d GPUs", r.Count)
		}
		if len(inv.GPUs) == 0 {
			why = append(why, "the node has no GPUs")
		}
		return nil, 0, fmt.Errorf("%w: flexgv: no %s with %s free (%s)", ErrNoRoom, gpus, what, strings.Join(why, "; "))
	}
	// Binpack: least left free first; spread: most. Ties by UUID, so that
	// every caller picks alike.
	slices.SortFunc(fits, func(a, b candidate) int {
		if a.freeAfter != b.freeAfter {
			if (a.freeAfter < b.freeAfter) == (policy == Binpack) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.uuid, b.uuid)
	})
	var sum float64
	for _, c := range fits[:r.Count] {
		uuids = append(uuids, c.uuid)
		sum += c.freeAfter
	}
	score = sum / float64(r.Count)
	if policy == Binpack {
		score = 1 - score
	}
	return uuids, score, nil
}

// Capacity is the memory and compute a node offers as extended resources,
// those of its healthy GPUs: kube-scheduler and the kubelet check pods'
// totals against it, Choose decides per GPU. Its vGPU slots are counted
// by the kubelet from what the device plugin lists.
func (inv Inventory) Capacity() corev1.ResourceList {
	var healthy, mem int64
	for _, g := range inv.GPUs {
		if g.Healthy {
			healthy++
			mem += g.MemoryMiB
		}
	}
	return corev1.ResourceList{
		ResourceMemory:  *resource.NewQuantity(mem, resource.DecimalSI),
		ResourceCompute: *resource.NewQuantity(100*healthy, resource.DecimalSI),
	}
}
