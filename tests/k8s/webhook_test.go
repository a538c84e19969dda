package k8s

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flexgv/flexgv/internal/k8s/vgpu"
)

// servingCert makes a CA and a certificate it signs for 127.0.0.1, and
// returns the CA (PEM) and the certificate's and key's files.
func servingCert(t *testing.T) (caPEM []byte, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "flexgv test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "flexgv webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	caCert, _ := x509.ParseCertificate(caDER)
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), certFile, keyFile
}

// serveWebhook runs flexgv webhook on a local address, with webhook
// configurations as the chart has them but for namespace ns alone; kill
// ends it (an outage) and start starts it again on the same address.
func serveWebhook(t *testing.T, ns, schedulerName string) (kill, start func()) {
	t.Helper()
	ctx := context.Background()
	caPEM, certFile, keyFile := servingCert(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	var cmd *exec.Cmd
	start = func() {
		t.Helper()
		cmd = startFlexGV(t, nil, "webhook", "--listen", addr, "--tls-cert", certFile, "--tls-key", keyFile, "--scheduler-name", schedulerName)
		eventually(t, 10*time.Second, "flexgv webhook serving", func() (bool, error) {
			resp, err := hc.Get("https://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err == nil, err
		})
	}
	kill = func() {
		t.Helper()
		cmd.Process.Kill()
		eventually(t, 10*time.Second, "flexgv webhook gone", func() (bool, error) {
			resp, err := hc.Get("https://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err != nil, nil
		})
	}
	start()

	// Only for ns: other tests' pods do not go through it.
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
	rules := []admissionregv1.RuleWithOperations{{
		Operations: []admissionregv1.OperationType{admissionregv1.Create},
		Rule:       admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
	}}
	// As the chart has them: updates are validated too.
	validateRules := []admissionregv1.RuleWithOperations{{
		Operations: []admissionregv1.OperationType{admissionregv1.Create, admissionregv1.Update},
		Rule:       rules[0].Rule,
	}}
	none, fail := admissionregv1.SideEffectClassNone, admissionregv1.Fail
	url := func(path string) *string { u := "https://" + addr + path; return &u }
	reg := cp.Client.AdmissionregistrationV1()
	name := "flexgv-test-" + ns
	if _, err := reg.ValidatingWebhookConfigurations().Create(ctx, &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregv1.ValidatingWebhook{{
			Name: "validate.flexgv.io", ClientConfig: admissionregv1.WebhookClientConfig{URL: url("/validate"), CABundle: caPEM},
			Rules: validateRules, NamespaceSelector: selector, SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}) })
	if _, err := reg.MutatingWebhookConfigurations().Create(ctx, &admissionregv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregv1.MutatingWebhook{{
			Name: "mutate.flexgv.io", ClientConfig: admissionregv1.WebhookClientConfig{URL: url("/mutate"), CABundle: caPEM},
			Rules: rules, NamespaceSelector: selector, SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}) })
	return kill, start
}

func TestWebhookRefusesBadRequests(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t, "webhook")
	serveWebhook(t, ns, "flexgv-test")

	memOnly := vgpuPod(ns, "mem-only", "none", 1024, 0)
	delete(memOnly.Spec.Containers[0].Resources.Limits, vgpu.ResourceVGPU)
	tooMuch := vgpuPod(ns, "too-much", "none", 1024, 150)
	urgent := vgpuPod(ns, "urgent", "none", 1024, 0)
	urgent.Annotations = map[string]string{vgpu.AnnotationPriority: "urgent"}
	capped := vgpuPod(ns, "capped", "none", 1024, 50)
	capped.Annotations = map[string]string{vgpu.AnnotationComputeMax: "40"}
	placed := vgpuPod(ns, "placed", "none", 1024, 0)
	placed.Annotations = map[string]string{vgpu.AnnotationRemoteGPU: "gpu-server/GPU-1"}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{memOnly, `admission webhook "validate.flexgv.io" denied the request: container app asks for flexgv.io/gpu-memory without flexgv.io/vgpu; add flexgv.io/vgpu: 1`},
		{tooMuch, `admission webhook "validate.flexgv.io" denied the request: container app: flexgv.io/gpu-compute 150 is not a share of one GPU; give a percentage from 1 to 100 (per vGPU), or none`},
		{urgent, `admission webhook "validate.flexgv.io" denied the request: flexgv.io/priority "urgent" is not a priority; use low, normal, high or a number from 0 to 9 (higher runs first)`},
		{capped, `admission webhook "validate.flexgv.io" denied the request: container app: flexgv.io/gpu-compute 50 is above the cap flexgv.io/gpu-compute-max 40`},
		{placed, `admission webhook "validate.flexgv.io" denied the request: annotation flexgv.io/remote-gpu is written by the flexgv scheduler when it binds the pod`},
	} {
		// The API server takes up new webhook configurations within moments.
		var err error
		eventually(t, 10*time.Second, "pod "+tc.pod.Name+" refused", func() (bool, error) {
			_, err = cp.Client.CoreV1().Pods(ns).Create(ctx, tc.pod, metav1.CreateOptions{})
			if err == nil {
				zero := int64(0)
				cp.Client.CoreV1().Pods(ns).Delete(ctx, tc.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			}
			return err != nil, nil
		})
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("creating pod %s: %v\nwant: %s", tc.pod.Name, err, tc.want)
		}
	}

	// A good pod goes to the extender's scheduler, its priority spelled out;
	// pods without vGPUs are left alone.
	good, err := cp.Client.CoreV1().Pods(ns).Create(ctx, vgpuPod(ns, "good", "none", 1024, 30), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if good.Spec.SchedulerName != "flexgv-test" || good.Annotations[vgpu.AnnotationPriority] != "normal" {
		t.Errorf("good pod: scheduler %q, annotations %v", good.Spec.SchedulerName, good.Annotations)
	}
	// Nor can it name its GPUs later; other annotations it may change.
	good.Annotations[vgpu.AnnotationGPUs] = "GPU-1"
	if _, err := cp.Client.CoreV1().Pods(ns).Update(ctx, good, metav1.UpdateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "annotation flexgv.io/gpus is written by the flexgv scheduler") {
		t.Errorf("a pod naming its own GPUs by an update: %v", err)
	}
	delete(good.Annotations, vgpu.AnnotationGPUs)
	good.Annotations["team"] = "a"
	if _, err := cp.Client.CoreV1().Pods(ns).Update(ctx, good, metav1.UpdateOptions{}); err != nil {
		t.Errorf("an update of another annotation: %v", err)
	}
	plain := vgpuPod(ns, "plain", "none", 0, 0)
	plain.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	if plain, err = cp.Client.CoreV1().Pods(ns).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if plain.Spec.SchedulerName != corev1.DefaultSchedulerName || len(plain.Annotations) != 0 {
		t.Errorf("plain pod: scheduler %q, annotations %v", plain.Spec.SchedulerName, plain.Annotations)
	}
}

// hostIPv4 is an IPv4 address of an interface of this machine that an
// EndpointSlice may name: not loopback, not link-local.
func hostIPv4(t *testing.T) string {
	t.Helper()
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifaces {
		if i.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if ip := ipn.IP.To4(); ip != nil && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() {
				return ip.String()
			}
		}
	}
	t.Skip("no IPv4 address on this machine but loopback and link-local, which an EndpointSlice may not name")
	return ""
}

// serveChartWebhook runs flexgv webhook as the chart's Deployment does, its
// certificate and key those of the rendered Secret in objs, on a free port
// of ip; it serves until the test ends.
func serveChartWebhook(t *testing.T, objs []*unstructured.Unstructured, ip string) (port int32) {
	t.Helper()
	var args []string
	var secret *unstructured.Unstructured
	for _, o := range objs {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == "flexgv-webhook":
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			args, _, _ = unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		case o.GetKind() == "Secret" && o.GetName() == "flexgv-webhook-tls":
			secret = o
		}
	}
	if len(args) == 0 || secret == nil {
		t.Fatalf("the render has no webhook Deployment's args (%q) or no Secret", args)
	}
	// The Secret's files, as its volume mounts them at /tls.
	dir := t.TempDir()
	data, _, _ := unstructured.NestedStringMap(secret.Object, "data")
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		b, err := base64.StdEncoding.DecodeString(data[f])
		if err != nil || len(b) == 0 {
			t.Fatalf("the Secret's %s: %v", f, err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	port = int32(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	for i, a := range args {
		if strings.HasPrefix(a, "--listen=") {
			args[i] = "--listen=" + addr
		}
		args[i] = strings.ReplaceAll(args[i], "=/tls/", "="+dir+"/")
	}
	startFlexGV(t, nil, args...)
	// Served with the Secret's certificate, for the Service's name.
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	tlsConf := &tls.Config{RootCAs: pool, ServerName: "flexgv-webhook." + chartNamespace + ".svc"}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tlsConf}}
	eventually(t, 10*time.Second, "flexgv webhook serving on "+addr, func() (bool, error) {
		resp, err := hc.Get("https://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil, err
	})
	return port
}

// narrowChartWebhook makes the rendered webhook Service of objs one
// without pods (its endpoint is the test's, see webhookEndpoint) and
// narrows the rendered webhook configurations to namespace ns (other
// tests' pods do not go through them), their service reference and
// caBundle as rendered.
func narrowChartWebhook(objs []*unstructured.Unstructured, ns string) {
	for _, o := range objs {
		switch o.GetKind() {
		case "Service":
			if o.GetName() == "flexgv-webhook" {
				unstructured.RemoveNestedField(o.Object, "spec", "selector")
			}
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				unstructured.SetNestedStringMap(h.(map[string]any), map[string]string{corev1.LabelMetadataName: ns}, "namespaceSelector", "matchLabels")
			}
			unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
		}
	}
}

// webhookEndpoint is the chart's webhook Service's EndpointSlice, naming
// ip:port, until the test ends.
func webhookEndpoint(t *testing.T, ip string, port int32) {
	t.Helper()
	ctx := context.Background()
	slices := cp.Client.DiscoveryV1().EndpointSlices(chartNamespace)
	https := "https"
	if _, err := slices.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "flexgv-webhook-test", Labels: map[string]string{discoveryv1.LabelServiceName: "flexgv-webhook"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &https, Port: &port}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slices.Delete(ctx, "flexgv-webhook-test", metav1.DeleteOptions{}) })
}
