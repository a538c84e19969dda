package deviceplugin

import (
	"context"
	"errors"
	"log"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// nodeListing answers the plugin's listing of the node's pods with what
// view returns, as an API server behind or a partial answer would; asking
// for a pod by name still gets the truth, unless byName fails.
func nodeListing(client *fake.Clientset, view func() []corev1.Pod, byName error) {
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		fields := a.(k8stesting.ListAction).GetListRestrictions().Fields.String()
		switch {
		case strings.Contains(fields, "spec.nodeName"):
			return true, &corev1.PodList{Items: view()}, nil
		case strings.Contains(fields, "metadata.name") && byName != nil:
			return true, nil, byName
		}
		return false, nil, nil
	})
}

func tenantNames(d *fakeDaemon) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.tenants))
}

// A tenant goes only where the API server says its pod is gone or
// finished: a listing of the node's pods that misses a running pod keeps
// its tenant, and says so.
func TestSyncKeepsTheTenantOfAPodTheListingMissed(t *testing.T) {
	run := placedPod("run", 1000, time.Now())
	run.Status.Phase = corev1.PodRunning
	done := placedPod("done", 1000, time.Now())
	done.Status.Phase = corev1.PodSucceeded
	again := placedPod("again", 1000, time.Now()) // a new pod of the name of one gone
	p, _, d := startPlugin(t, run, done, again)
	var logged strings.Builder
	p.log = log.New(&logged, "", 0)
	for _, tn := range []Tenant{
		{Name: "pod-uid-run", Namespace: "ns", Pod: "run"},
		{Name: "pod-uid-done", Namespace: "ns", Pod: "done"},
		{Name: "pod-uid-gone", Namespace: "ns", Pod: "gone"},
		{Name: "pod-uid-again-before", Namespace: "ns", Pod: "again"},
		{Name: "pod-uid-unrecorded"}, // made by a daemon that recorded no pod
		{Name: "kept-by-hand"},       // not the plugin's
	} {
		d.tenants[tn.Name] = tn
	}
	nodeListing(p.client.(*fake.Clientset), func() []corev1.Pod { return nil }, nil)
	p.syncTenants(context.Background())
	if got, want := tenantNames(d), []string{"kept-by-hand", "pod-uid-run"}; !slices.Equal(got, want) {
		t.Errorf("tenants left %v, want %v", got, want)
	}
	for _, want := range []string{
		"tenant pod-uid-run kept: its pod ns/run is Running, though the listing of node node's pods did not show it so",
		"deleted tenant pod-uid-done: its pod ns/done has finished (Succeeded)",
		"deleted tenant pod-uid-gone: its pod ns/gone is gone",
		"deleted tenant pod-uid-again-before: its pod ns/again is gone",
		"deleted tenant pod-uid-unrecorded: its pod is gone",
	} {
		if !strings.Contains(logged.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, logged.String())
		}
	}
}

// Where the API server cannot say whether a pod is gone, its tenant stays.
func TestSyncKeepsTheTenantWhenItsPodCannotBeAskedFor(t *testing.T) {
	p, _, d := startPlugin(t)
	var logged strings.Builder
	p.log = log.New(&logged, "", 0)
	d.tenants["pod-uid-a"] = Tenant{Name: "pod-uid-a", Namespace: "ns", Pod: "a"}
	nodeListing(p.client.(*fake.Clientset), func() []corev1.Pod { return nil }, errors.New("the server is currently unable to handle the request"))
	p.syncTenants(context.Background())
	if got := tenantNames(d); !slices.Equal(got, []string{"pod-uid-a"}) {
		t.Errorf("tenants left %v", got)
	}
	if want := "tenant pod-uid-a kept: asking for its pod ns/a: the server is currently unable to handle the request"; !strings.Contains(logged.String(), want) {
		t.Errorf("log does not say %q:\n%s", want, logged.String())
	}
}

// A pod allocated while the node's pods are being listed (its tenant made
// after the listing was taken) keeps its tenant.
func TestSyncKeepsATenantMadeDuringTheListing(t *testing.T) {
	p, _, d := startPlugin(t)
	client := p.client.(*fake.Clientset)
	nodeListing(client, func() []corev1.Pod {
		pod := placedPod("new", 1000, time.Now())
		if _, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), "ns", "new"); err != nil {
			// Bound and allocated after the listing's snapshot.
			client.Tracker().Create(corev1.SchemeGroupVersion.WithResource("pods"), pod, "ns", metav1.CreateOptions{})
			d.CreateTenant(context.Background(), Tenant{Name: "pod-uid-new", Namespace: "ns", Pod: "new"})
		}
		return nil
	}, nil)
	p.syncTenants(context.Background())
	if got := tenantNames(d); !slices.Equal(got, []string{"pod-uid-new"}) {
		t.Errorf("tenants left %v, want the new pod's", got)
	}
}
