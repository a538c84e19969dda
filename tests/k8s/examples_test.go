package k8s

import (
	"bytes"
	"encoding/json"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
	"github.com/flexgv/flexgv/internal/k8s/webhook"
)

// The pod examples of docs/KUBERNETES.md are pods the API server and the
// webhook take, asking for what their text says.
func TestDocsPodExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/KUBERNETES.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Pod examples\n")
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(section, -1)
	ns := namespace(t, "docs-examples")
	var objs []*unstructured.Unstructured
	pods := map[string]*corev1.Pod{}
	for _, b := range blocks {
		for _, d := range strings.Split(b[1], "\n---\n") {
			o := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(d), &o.Object); err != nil {
				t.Fatalf("%v in\n%s", err, d)
			}
			if o.GetKind() == "Pod" {
				o.SetNamespace(ns)
				var pod corev1.Pod
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &pod); err != nil {
					t.Fatal(err)
				}
				pods[pod.Name] = &pod
			}
			objs = append(objs, o)
		}
	}
	// The PriorityClass made for real, as the pod needs it; the pods in a
	// dry run.
	var classes []string
	for _, o := range objs {
		if o.GetKind() == "PriorityClass" {
			classes = append(classes, o.GetName())
		}
	}
	apply(t, objs, "PriorityClass")
	objs = slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "PriorityClass" })
	if kinds := dryRun(t, objs); kinds["Pod"] != 3 || len(kinds) != 1 || !slices.Equal(classes, []string{"gpu-interactive"}) {
		t.Errorf("the examples hold %v and PriorityClasses %v, want 3 pods and gpu-interactive", kinds, classes)
	}

	srv := httptest.NewServer((&webhook.Webhook{SchedulerName: "flexgv-scheduler", Log: log.New(os.Stderr, "", 0)}).Handler())
	defer srv.Close()
	want := map[string]vgpu.Request{
		"train-small":  {Container: "train", Count: 1, MemoryMiB: 10240, ComputePct: 30, Priority: vgpu.Normal},
		"infer-remote": {Container: "infer", Count: 1, MemoryMiB: 8192, ComputePct: 20, Priority: vgpu.Normal, Remote: true},
		"notebook":     {Container: "notebook", Count: 1, MemoryMiB: 16384, ComputePct: 50, ComputeMax: 80, Priority: vgpu.High},
	}
	for name, w := range want {
		pod := pods[name]
		if pod == nil {
			t.Errorf("no example pod %s", name)
			continue
		}
		raw, _ := json.Marshal(pod)
		review, _ := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{UID: "1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
				Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw}},
		})
		resp, err := http.Post(srv.URL+"/validate", "application/json", bytes.NewReader(review))
		if err != nil {
			t.Fatal(err)
		}
		var out admissionv1.AdmissionReview
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if out.Response == nil || !out.Response.Allowed {
			t.Errorf("the webhook refuses example %s: %+v", name, out.Response)
		}
		r, ok, err := vgpu.PodRequest(pod)
		if !ok || err != nil || r != w {
			t.Errorf("example %s asks for %+v (%v, %v), want %+v", name, r, ok, err, w)
		}
	}
	if pc := pods["notebook"].Spec.PriorityClassName; pc != "gpu-interactive" {
		t.Errorf("the priority example's class is %q", pc)
	}
}
