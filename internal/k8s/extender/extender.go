// Package extender is FlexGV's kube-scheduler extender (flexgv scheduler):
// over HTTP it filters out nodes with no GPU that has room for a pod's
// vGPUs, scores the rest by placement policy, and binds the pod itself,
// recording the GPUs it chose on the pod with the binding, so that the
// node's device plugin hands the container exactly those.
//
// What a GPU holds is what the pods placed on it ask for, read from the
// API server, plus the placements this extender made that the API server
// has not yet reported back; binds reserve under one lock, so concurrent
// bindings never oversubscribe a GPU.
package extender

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// byNode indexes pods by the node they are on.
const byNode = "node"

// Extender decides placements; Handler serves it to kube-scheduler.
type Extender struct {
	client  kubernetes.Interface
	policy  vgpu.Policy
	pods    cache.Indexer
	nodes   listersv1.NodeLister
	pdbs    policylisters.PodDisruptionBudgetLister
	factory informers.SharedInformerFactory
	log     *log.Logger

	mu sync.Mutex
	// reserved are placements bound (or being bound) here that the pod
	// informer has not shown yet, by pod UID.
	reserved map[types.UID]placement
	// resuming are suspended pods asked to resume here that the informer
	// still shows suspended: they hold their GPUs again from the asking.
	resuming map[types.UID]bool
	// moving are the remote vGPUs asked to move here (drain.go) that the
	// informer does not show moving yet: placed on their target already.
	moving map[types.UID]placement
	// unmoved is why a remote vGPU of a drained server could not move,
	// said when it changes.
	unmoved map[types.UID]string
	// wake asks the resume loop to look now (a pod gone or changed).
	wake chan struct{}
}

type placement struct {
	node string
	gpus []string
	req  vgpu.Request
}

// New returns an extender over client's pods and nodes; Start runs it.
func New(client kubernetes.Interface, policy vgpu.Policy, w io.Writer) *Extender {
	f := informers.NewSharedInformerFactory(client, 0)
	podInf := f.Core().V1().Pods().Informer()
	e := &Extender{
		client: client, policy: policy, factory: f,
		pods:     podInf.GetIndexer(),
		nodes:    f.Core().V1().Nodes().Lister(),
		pdbs:     f.Policy().V1().PodDisruptionBudgets().Lister(),
		log:      log.New(w, "flexgv scheduler: ", 0),
		reserved: map[types.UID]placement{},
		resuming: map[types.UID]bool{},
		moving:   map[types.UID]placement{},
		unmoved:  map[types.UID]string{},
		wake:     make(chan struct{}, 1),
	}
	// A pod is indexed by the node whose GPU it holds: a remote vGPU's is
	// its server's, not the node that runs the pod (and, while it moves,
	// the server it moves to too).
	podInf.AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		if server, _, ok := vgpu.PodRemoteGPU(p); ok {
			if to, _, moving := vgpu.PodRemoteMove(p); moving {
				return []string{server, to}, nil
			}
			return []string{server}, nil
		}
		if p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}})
	// A server cordoned has its remote vGPUs moved (drain.go) at once.
	f.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { e.poke() },
	})
	// Once the informer shows a placement, or the pod is gone, the
	// reservation has done its work.
	podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { e.seen(obj) },
		UpdateFunc: func(_, obj any) { e.seen(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				e.mu.Lock()
				delete(e.reserved, p.UID)
				delete(e.resuming, p.UID)
				delete(e.moving, p.UID)
				delete(e.unmoved, p.UID)
				e.mu.Unlock()
				e.poke()
			}
		},
	})
	return e
}

func (e *Extender) seen(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" || (len(podGPUs(p)) == 0) {
		return
	}
	e.mu.Lock()
	delete(e.reserved, p.UID)
	if !vgpu.SuspendWanted(p) {
		delete(e.resuming, p.UID)
	}
	if to, _, moving := vgpu.PodRemoteMove(p); moving && to == e.moving[p.UID].node {
		delete(e.moving, p.UID)
	}
	e.mu.Unlock()
	e.poke()
}

// poke wakes the resume loop.
func (e *Extender) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// Start watches pods and nodes until ctx ends, and returns once it has
// listed them all; suspended pods are resumed meanwhile as room returns.
func (e *Extender) Start(ctx context.Context) error {
	e.factory.Start(ctx.Done())
	for typ, ok := range e.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("listing %v from the API server failed", typ)
		}
	}
	go e.reconcileLoop(ctx)
	return nil
}

// used is what the pods on node hold of each GPU, reservations included,
// for a pod of priority prio. The caller holds e.mu.
func (e *Extender) used(node string, ctxMiB, prio int64) (map[string]vgpu.Use, error) {
	return e.usedWithout(node, ctxMiB, nil, prio)
}

// yields: suspended pod p holds no memory or compute for a pod of
// priority prio, only its vGPU slot. The caller holds e.mu.
func (e *Extender) yields(p *corev1.Pod, prio int64) bool {
	return vgpu.SuspendWanted(p) && vgpu.Suspended(p) && !e.resuming[p.UID] && prio > int64(podPriority(p))
}

// usedWithout is used without the pods in gone (victims of a preemption):
// those it maps to true are evicted, the others suspended (they keep
// their vGPU slot).
func (e *Extender) usedWithout(node string, ctxMiB int64, gone map[types.UID]bool, prio int64) (map[string]vgpu.Use, error) {
	objs, err := e.pods.ByIndex(byNode, node)
	if err != nil {
		return nil, err
	}
	use := map[string]vgpu.Use{}
	add := func(gpus []string, r vgpu.Request) {
		for _, g := range gpus {
			u := use[g]
			u.Add(r, ctxMiB)
			use[g] = u
		}
	}
	counted := map[types.UID]bool{}
	for _, obj := range objs {
		p := obj.(*corev1.Pod)
		gpus := podGPUs(p)
		evicted, leaving := gone[p.UID]
		if len(gpus) == 0 || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || evicted {
			continue
		}
		r, ok, err := vgpu.PodRequest(p)
		if err != nil || !ok {
			// Admitted before the webhook, or edited since: it may still
			// hold its GPUs, so it counts for what it can be read as.
			e.log.Printf("pod %s/%s on %s: %v; counting it as holding nothing", p.Namespace, p.Name, node, err)
			continue
		}
		counted[p.UID] = true
		if leaving || e.yields(p, prio) {
			for _, g := range gpus {
				u := use[g]
				u.Pods++
				use[g] = u
			}
			continue
		}
		add(gpus, r)
	}
	for _, m := range []map[types.UID]placement{e.reserved, e.moving} {
		for uid, pl := range m {
			if pl.node == node && !counted[uid] {
				add(pl.gpus, pl.req)
			}
		}
	}
	return use, nil
}

// podGPUs are the GPUs a pod holds: its node's, or its remote vGPU's on
// its server (and, while it moves, on the server it moves to).
func podGPUs(p *corev1.Pod) []string {
	if _, uuid, ok := vgpu.PodRemoteGPU(p); ok {
		if _, to, moving := vgpu.PodRemoteMove(p); moving {
			return []string{uuid, to}
		}
		return []string{uuid}
	}
	return vgpu.PodGPUs(p)
}

// chooseRemote picks, for a remote vGPU, the GPU server node (one whose
// inventory has an address) and the GPU with room that the policy likes
// best. The caller holds e.mu.
func (e *Extender) chooseRemote(r vgpu.Request, prio int64) (server, uuid string, err error) {
	nodes, err := e.nodes.List(labels.Everything())
	if err != nil {
		return "", "", err
	}
	slices.SortFunc(nodes, func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	best, servers, cordoned := -1.0, 0, 0
	for _, n := range nodes {
		if inv, ok, err := vgpu.NodeInventory(n); err != nil || !ok || inv.Remote == "" {
			continue
		}
		if n.Spec.Unschedulable { // cordoned, being drained: nothing new there
			cordoned++
			continue
		}
		servers++
		gpus, score, err := e.choose(n.Name, r, prio)
		if err == nil && score > best {
			best, server, uuid = score, n.Name, gpus[0]
		}
	}
	if server == "" {
		// Said with "percent", not "%": kube-scheduler's events take the
		// message as a format string.
		return "", "", fmt.Errorf("%w: flexgv: none of %d GPU servers (%d more cordoned) has a GPU with %d MiB (+context) and %d percent compute free for a remote vGPU",
			vgpu.ErrNoRoom, servers, cordoned, r.MemoryMiB, r.ComputePct)
	}
	return server, uuid, nil
}

// choose picks GPUs of node for r, of a pod of priority prio. The caller
// holds e.mu.
func (e *Extender) choose(node string, r vgpu.Request, prio int64) ([]string, float64, error) {
	n, err := e.nodes.Get(node)
	if err != nil {
		return nil, 0, fmt.Errorf("flexgv: node %s: %w", node, err)
	}
	inv, ok, err := vgpu.NodeInventory(n)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return nil, 0, fmt.Errorf("%w: flexgv: node %s has no FlexGV device plugin (no %s annotation)", vgpu.ErrNoRoom, node, vgpu.AnnotationInventory)
	}
	use, err := e.used(node, inv.ContextMiB, prio)
	if err != nil {
		return nil, 0, err
	}
	return vgpu.Choose(inv, use, r, e.policy)
}

// Filter keeps the nodes with room for the pod.
func (e *Extender) Filter(args extenderv1.ExtenderArgs) extenderv1.ExtenderFilterResult {
	if args.Pod == nil || args.NodeNames == nil {
		return extenderv1.ExtenderFilterResult{Error: "flexgv scheduler: expects a pod and node names (nodeCacheCapable: true)"}
	}
	r, ok, err := vgpu.PodRequest(args.Pod)
	if err != nil {
		return extenderv1.ExtenderFilterResult{Error: fmt.Sprintf("flexgv: pod %s/%s: %v", args.Pod.Namespace, args.Pod.Name, err)}
	}
	if !ok {
		return extenderv1.ExtenderFilterResult{NodeNames: args.NodeNames}
	}
	fits, failed := []string{}, extenderv1.FailedNodesMap{}
	e.mu.Lock()
	defer e.mu.Unlock()
	if r.Remote {
		// Any node runs it (kube-scheduler counts its slots) if a server has room.
		if _, _, err := e.chooseRemote(r, int64(podPriority(args.Pod))); err != nil {
			for _, node := range *args.NodeNames {
				failed[node] = strings.TrimPrefix(err.Error(), vgpu.ErrNoRoom.Error()+": ")
			}
			return extenderv1.ExtenderFilterResult{NodeNames: &fits, FailedNodes: failed}
		}
		return extenderv1.ExtenderFilterResult{NodeNames: args.NodeNames}
	}
	for _, node := range *args.NodeNames {
		if _, _, err := e.choose(node, r, int64(podPriority(args.Pod))); err != nil {
			failed[node] = strings.TrimPrefix(err.Error(), vgpu.ErrNoRoom.Error()+": ")
			continue
		}
		fits = append(fits, node)
	}
	return extenderv1.ExtenderFilterResult{NodeNames: &fits, FailedNodes: failed}
}

// Prioritize scores nodes 0..MaxExtenderPriority by placement policy.
func (e *Extender) Prioritize(args extenderv1.ExtenderArgs) (extenderv1.HostPriorityList, error) {
	if args.Pod == nil || args.NodeNames == nil {
		return nil, errors.New("expects a pod and node names (nodeCacheCapable: true)")
	}
	r, ok, err := vgpu.PodRequest(args.Pod)
	if err != nil {
		return nil, err
	}
	out := extenderv1.HostPriorityList{}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, node := range *args.NodeNames {
		var score float64
		if ok && !r.Remote {
			_, score, _ = e.choose(node, r, int64(podPriority(args.Pod)))
		}
		out = append(out, extenderv1.HostPriority{Host: node, Score: int64(math.Round(score * float64(extenderv1.MaxExtenderPriority)))})
	}
	return out, nil
}

// Bind places the pod on GPUs of the node the scheduler chose and binds it
// there, the GPUs recorded on the pod by the same call.
func (e *Extender) Bind(ctx context.Context, args extenderv1.ExtenderBindingArgs) error {
	pod, err := e.pod(ctx, args.PodNamespace, args.PodName, args.PodUID)
	if err != nil {
		return err
	}
	r, ok, err := vgpu.PodRequest(pod)
	if err != nil {
		return err
	}
	annotations := map[string]string{}
	where := ""
	if ok && r.Remote {
		e.mu.Lock()
		server, uuid, err := e.chooseRemote(r, int64(podPriority(pod)))
		if err == nil {
			e.reserved[args.PodUID] = placement{node: server, gpus: []string{uuid}, req: r}
		}
		e.mu.Unlock()
		if err != nil {
			return err
		}
		annotations[vgpu.AnnotationRemoteGPU] = server + "/" + uuid
		annotations[vgpu.AnnotationBoundAt] = time.Now().UTC().Format(time.RFC3339Nano)
		where = "remote GPU " + server + "/" + uuid
	} else if ok {
		e.mu.Lock()
		gpus, _, err := e.choose(args.Node, r, int64(podPriority(pod)))
		if err == nil {
			e.reserved[args.PodUID] = placement{node: args.Node, gpus: gpus, req: r}
		}
		e.mu.Unlock()
		if err != nil {
			return err
		}
		annotations[vgpu.AnnotationGPUs] = strings.Join(gpus, ",")
		annotations[vgpu.AnnotationBoundAt] = time.Now().UTC().Format(time.RFC3339Nano)
		where = "GPUs " + annotations[vgpu.AnnotationGPUs]
	}
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: args.PodName, Namespace: args.PodNamespace, UID: args.PodUID, Annotations: annotations},
		Target:     corev1.ObjectReference{Kind: "Node", Name: args.Node},
	}
	if err := e.client.CoreV1().Pods(args.PodNamespace).Bind(ctx, b, metav1.CreateOptions{}); err != nil {
		e.mu.Lock()
		delete(e.reserved, args.PodUID)
		e.mu.Unlock()
		return err
	}
	if ok {
		e.log.Printf("bound %s/%s to %s, %s", args.PodNamespace, args.PodName, args.Node, where)
	}
	return nil
}

// ProcessPreemption answers which pods to evict, per candidate node, for
// pod to fit on a GPU there: kube-scheduler proposes victims by the node's
// totals, which may free memory on the wrong GPUs. For each node the
// extender takes, GPU by GPU, the fewest pods of lower priority than pod
// placed there (the lowest priority first, then the largest) whose
// eviction makes room, uses the cheapest GPUs, and drops nodes where no
// eviction makes room. Victims may be pods kube-scheduler did not propose:
// only the extender knows which GPU holds what.
//
// Where on some node every victim allows suspension, none is evicted
// anywhere: the victims of the node with the fewest are asked to suspend
// (suspend.go), and the pod fits once they are off the GPU. So also while
// pods suspended for it are on their way off.
func (e *Extender) ProcessPreemption(args extenderv1.ExtenderPreemptionArgs) (*extenderv1.ExtenderPreemptionResult, error) {
	if args.Pod == nil {
		return nil, errors.New("expects a pod")
	}
	r, ok, err := vgpu.PodRequest(args.Pod)
	if err != nil {
		return nil, err
	}
	out := &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	if ok && r.Remote {
		return out, nil // evicting pods of the node that runs it frees nothing on a server
	}
	if !ok { // not ours to judge: as proposed
		out.NodeNameToMetaVictims = args.NodeNameToMetaVictims
		return out, nil
	}
	e.mu.Lock()
	var suspend [][]*corev1.Pod
	waiting := false
	for node := range args.NodeNameToMetaVictims {
		victims, leaving, suspends, err := e.victims(node, args.Pod, r)
		if err != nil {
			e.log.Printf("preemption for %s/%s on %s: %v", args.Pod.Namespace, args.Pod.Name, node, err)
			continue
		}
		if len(victims) == 0 {
			waiting = waiting || leaving
			continue // room without evicting: no preemption needed there
		}
		if suspends {
			suspend = append(suspend, victims)
			continue
		}
		mv := &extenderv1.MetaVictims{}
		for _, v := range victims {
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: string(v.UID)})
		}
		out.NodeNameToMetaVictims[node] = mv
	}
	e.mu.Unlock()
	if waiting {
		return &extenderv1.ExtenderPreemptionResult{}, nil
	}
	if len(suspend) > 0 {
		slices.SortFunc(suspend, func(a, b []*corev1.Pod) int {
			return cmp.Or(len(a)-len(b), strings.Compare(a[0].Spec.NodeName, b[0].Spec.NodeName))
		})
		e.suspend(args.Pod, suspend[0])
		return &extenderv1.ExtenderPreemptionResult{}, nil
	}
	return out, nil
}

// victims are the pods of node to evict for pod (request r) to fit; an
// error when no eviction makes room. suspends: the node may suspend them
// all instead. Pods of lower priority being deleted or suspended are
// counted gone; leaving says whether any is being suspended. The caller
// holds e.mu.
func (e *Extender) victims(node string, pod *corev1.Pod, r vgpu.Request) (victims []*corev1.Pod, leaving, suspends bool, err error) {
	n, err := e.nodes.Get(node)
	if err != nil {
		return nil, false, false, err
	}
	inv, ok, err := vgpu.NodeInventory(n)
	if err != nil || !ok {
		return nil, false, false, fmt.Errorf("no inventory: %v", err)
	}
	objs, err := e.pods.ByIndex(byNode, node)
	if err != nil {
		return nil, false, false, err
	}
	suspendable := func(p *corev1.Pod) bool { return inv.Suspend && vgpu.Suspendable(p) }
	prio := podPriority(pod)
	// Pods already on their way out (evicted or asked to suspend before)
	// are counted gone.
	gone := map[types.UID]bool{}
	for _, obj := range objs {
		p := obj.(*corev1.Pod)
		if podPriority(p) >= prio {
			continue
		}
		if suspending := vgpu.SuspendWanted(p) && !vgpu.Suspended(p) && suspendable(p); suspending {
			gone[p.UID], leaving = false, true
		} else if p.DeletionTimestamp != nil {
			gone[p.UID] = true
		}
	}
	// Per GPU: the fewest evictions that leave room for one vGPU of r.
	one := r
	one.Count = 1
	type option struct {
		gpu  vgpu.GPU
		pods []*corev1.Pod
	}
	var options []option
	for _, g := range inv.GPUs {
		if !g.Healthy {
			continue
		}
		var cands []*corev1.Pod
		for _, obj := range objs {
			p := obj.(*corev1.Pod)
			if _, leaving := gone[p.UID]; !leaving && !e.yields(p, int64(prio)) && podPriority(p) < prio && slices.Contains(podGPUs(p), g.UUID) &&
				p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				cands = append(cands, p)
			}
		}
		// Pods a disruption budget protects last, as kube-scheduler
		// orders its own victims.
		slices.SortStableFunc(cands, func(a, b *corev1.Pod) int {
			if pa, pb := e.protected(a), e.protected(b); pa != pb {
				if pa {
					return 1
				}
				return -1
			}
			if c := cmp.Compare(podPriority(a), podPriority(b)); c != 0 {
				return c
			}
			ra, _, _ := vgpu.PodRequest(a)
			rb, _, _ := vgpu.PodRequest(b)
			return cmp.Compare(rb.MemoryMiB, ra.MemoryMiB)
		})
		gone := maps.Clone(gone)
		single := vgpu.Inventory{Slots: inv.Slots, ContextMiB: inv.ContextMiB, GPUs: []vgpu.GPU{g}, MPS: inv.MPS}
		var picked []*corev1.Pod
		for {
			use, err := e.usedWithout(node, inv.ContextMiB, gone, int64(prio))
			if err != nil {
				return nil, false, false, err
			}
			if _, _, err := vgpu.Choose(single, use, one, e.policy); err == nil {
				options = append(options, option{g, picked})
				break
			}
			if len(picked) == len(cands) {
				break // no eviction makes room on this GPU
			}
			next := cands[len(picked)]
			picked = append(picked, next)
			gone[next.UID] = !suspendable(next)
		}
	}
	if len(options) < r.Count {
		return nil, leaving, false, fmt.Errorf("no eviction of pods of lower priority makes room for %d vGPU(s) of %d MiB", r.Count, r.MemoryMiB)
	}
	// GPUs freed by suspending alone first (suspend.go), then the fewest
	// pods.
	evicts := func(o option) bool {
		return slices.ContainsFunc(o.pods, func(p *corev1.Pod) bool { return !suspendable(p) })
	}
	slices.SortStableFunc(options, func(a, b option) int {
		if ea, eb := evicts(a), evicts(b); ea != eb {
			if ea {
				return 1
			}
			return -1
		}
		return len(a.pods) - len(b.pods)
	})
	for _, o := range options[:r.Count] {
		for _, p := range o.pods {
			if !slices.Contains(victims, p) {
				victims = append(victims, p)
			}
		}
	}
	return victims, leaving, !slices.ContainsFunc(victims, func(p *corev1.Pod) bool { return !suspendable(p) }), nil
}

// protected: a PodDisruptionBudget that selects pod allows no disruption
// now (its status, as the disruption controller keeps it).
func (e *Extender) protected(pod *corev1.Pod) bool {
	pdbs, err := e.pdbs.PodDisruptionBudgets(pod.Namespace).List(labels.Everything())
	if err != nil {
		return false
	}
	for _, pdb := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err == nil && !sel.Empty() && sel.Matches(labels.Set(pod.Labels)) && pdb.Status.DisruptionsAllowed <= 0 {
			return true
		}
	}
	return false
}

func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// pod is the pod being bound, from the informer if it has it yet.
func (e *Extender) pod(ctx context.Context, ns, name string, uid types.UID) (*corev1.Pod, error) {
	if obj, ok, _ := e.pods.GetByKey(ns + "/" + name); ok {
		if p := obj.(*corev1.Pod); p.UID == uid {
			return p, nil
		}
	}
	p, err := e.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if p.UID != uid {
		return nil, apierrors.NewConflict(corev1.Resource("pods"), name, fmt.Errorf("pod %s/%s is another pod now (UID %s, not %s)", ns, name, p.UID, uid))
	}
	return p, nil
}

// maxBody bounds a request from the scheduler: a pod and node names.
const maxBody = 16 << 20

// Handler serves the extender verbs /filter, /prioritize and /bind.
func (e *Extender) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /filter", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderArgs
		if !decode(w, r, &args) {
			return
		}
		reply(w, e.Filter(args))
	})
	mux.HandleFunc("POST /prioritize", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderArgs
		if !decode(w, r, &args) {
			return
		}
		list, err := e.Prioritize(args)
		if err != nil {
			http.Error(w, "flexgv scheduler: "+err.Error(), http.StatusBadRequest)
			return
		}
		reply(w, list)
	})
	mux.HandleFunc("POST /bind", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderBindingArgs
		if !decode(w, r, &args) {
			return
		}
		var res extenderv1.ExtenderBindingResult
		if err := e.Bind(r.Context(), args); err != nil {
			res.Error = err.Error()
			e.log.Printf("binding %s/%s to %s: %v", args.PodNamespace, args.PodName, args.Node, err)
		}
		reply(w, res)
	})
	mux.HandleFunc("POST /preempt", func(w http.ResponseWriter, r *http.Request) {
		var args extenderv1.ExtenderPreemptionArgs
		if !decode(w, r, &args) {
			return
		}
		res, err := e.ProcessPreemption(args)
		if err != nil {
			http.Error(w, "flexgv scheduler: "+err.Error(), http.StatusBadRequest)
			return
		}
		reply(w, res)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	return mux
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(v); err != nil {
		http.Error(w, "flexgv scheduler: bad request: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// Serve runs the extender on addr (HOST:PORT) until ctx ends.
func Serve(ctx context.Context, e *Extender, addr string) error {
	srv := &http.Server{Addr: addr, Handler: e.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
