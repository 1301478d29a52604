package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	upcoord "k8s.io/api/coordination/v1"
	upcore "k8s.io/api/core/v1"
	updisc "k8s.io/api/discovery/v1"
	upnet "k8s.io/api/networking/v1"
	upequality "k8s.io/apimachinery/pkg/api/equality"
	uperrors "k8s.io/apimachinery/pkg/api/errors"
	upmeta "k8s.io/apimachinery/pkg/apis/meta/v1"
	upruntime "k8s.io/apimachinery/pkg/runtime"
	upschema "k8s.io/apimachinery/pkg/runtime/schema"
	upintstr "k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	coordinationv1 "lockstep.dev/lockstep/kube/api/coordination/v1"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	discoveryv1 "lockstep.dev/lockstep/kube/api/discovery/v1"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	networkingv1 "lockstep.dev/lockstep/kube/api/networking/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/schema"
)

// The upstream Kubernetes types are the definition of the wire format:
// these tests write an upstream object whose every field lockstep declares
// is set, read it into lockstep's type, write that, and read it back into
// the upstream type. Anything lost or renamed on the way differs.

var (
	when      = time.Date(2026, 11, 28, 3, 4, 5, 0, time.UTC)
	whenMicro = time.Date(2026, 11, 28, 3, 4, 5, 123456000, time.UTC)
)

// fullMeta is upstream ObjectMeta with every field set: the kinds lockstep
// writes back whole must lose none of it.
func fullMeta() upmeta.ObjectMeta {
	t := upmeta.NewTime(when)
	return upmeta.ObjectMeta{
		Name: "n", GenerateName: "n-", Namespace: "ns", SelfLink: "/x", UID: "u-1", ResourceVersion: "42",
		Generation: 7, CreationTimestamp: t, DeletionTimestamp: &t, DeletionGracePeriodSeconds: ptr.To[int64](30),
		Labels: map[string]string{"a": "b"}, Annotations: map[string]string{"c": "d"},
		OwnerReferences: []upmeta.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "n", UID: "u-0", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false)}},
		Finalizers:      []string{"f"},
		ManagedFields: []upmeta.ManagedFieldsEntry{{Manager: "m", Operation: upmeta.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &t,
			FieldsType: "FieldsV1", FieldsV1: &upmeta.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}, Subresource: "status"}},
	}
}

func roundTrip[U, L any](t *testing.T, name string, in *U) {
	t.Helper()
	j, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("%s: marshal upstream: %v", name, err)
	}
	var ours L
	if err := json.Unmarshal(j, &ours); err != nil {
		t.Fatalf("%s: read into lockstep's type: %v\n%s", name, err, j)
	}
	j2, err := json.Marshal(&ours)
	if err != nil {
		t.Fatalf("%s: marshal lockstep's type: %v", name, err)
	}
	out := new(U)
	if err := json.Unmarshal(j2, out); err != nil {
		t.Fatalf("%s: read back into upstream: %v\n%s", name, err, j2)
	}
	if !upequality.Semantic.DeepEqual(in, out) {
		t.Errorf("%s: lost on the way through lockstep's type:\n upstream %s\n back     %s", name, j, j2)
	}
}

func TestRoundTripThroughUpstream(t *testing.T) {
	meta := fullMeta()
	tcp, udp := upcore.ProtocolTCP, upcore.ProtocolUDP
	always := upcore.ContainerRestartPolicyAlways
	local := upcore.ServiceInternalTrafficPolicyLocal
	single := upcore.IPFamilyPolicySingleStack
	proxy := upcore.LoadBalancerIPModeProxy
	port := upintstr.FromString("http")

	t.Run("Lease", func(t *testing.T) {
		roundTrip[upcoord.Lease, coordinationv1.Lease](t, "Lease", &upcoord.Lease{
			TypeMeta: upmeta.TypeMeta{Kind: "Lease", APIVersion: "coordination.k8s.io/v1"}, ObjectMeta: meta,
			Spec: upcoord.LeaseSpec{HolderIdentity: ptr.To("op-1"), LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime: &upmeta.MicroTime{Time: whenMicro}, RenewTime: &upmeta.MicroTime{Time: whenMicro.Add(time.Second)},
				LeaseTransitions: ptr.To[int32](3), Strategy: ptr.To(upcoord.OldestEmulationVersion), PreferredHolder: ptr.To("op-2")},
		})
	})
	t.Run("Event", func(t *testing.T) {
		roundTrip[upcore.Event, corev1.Event](t, "Event", &upcore.Event{
			TypeMeta: upmeta.TypeMeta{Kind: "Event", APIVersion: "v1"}, ObjectMeta: meta,
			InvolvedObject: upcore.ObjectReference{Kind: "NetworkPolicy", Namespace: "ns", Name: "np", UID: "u", APIVersion: "networking.k8s.io/v1", ResourceVersion: "9", FieldPath: "spec"},
			Reason:         "R", Message: "m", Source: upcore.EventSource{Component: "lockstep", Host: "node"},
			FirstTimestamp: upmeta.NewTime(when), LastTimestamp: upmeta.NewTime(when), Count: 2, Type: upcore.EventTypeWarning,
			EventTime: upmeta.NewMicroTime(whenMicro), Action: "Enforce", ReportingController: "lockstep.dev/agent", ReportingInstance: "node",
		})
	})
	t.Run("Pod", func(t *testing.T) {
		roundTrip[upcore.Pod, corev1.Pod](t, "Pod", &upcore.Pod{
			TypeMeta: upmeta.TypeMeta{Kind: "Pod", APIVersion: "v1"}, ObjectMeta: meta,
			Spec: upcore.PodSpec{NodeName: "node", HostNetwork: true,
				InitContainers: []upcore.Container{{Name: "side", Image: "i", RestartPolicy: &always, Ports: []upcore.ContainerPort{{Name: "m", ContainerPort: 9, Protocol: udp, HostPort: 90, HostIP: "1.2.3.4"}}}},
				Containers:     []upcore.Container{{Name: "c", Image: "i", Ports: []upcore.ContainerPort{{Name: "http", ContainerPort: 80, Protocol: tcp}}}}},
			Status: upcore.PodStatus{Phase: upcore.PodRunning, Conditions: []upcore.PodCondition{{Type: upcore.PodReady, Status: upcore.ConditionTrue}},
				HostIP: "192.0.2.1", HostIPs: []upcore.HostIP{{IP: "192.0.2.1"}}, PodIP: "10.0.0.1", PodIPs: []upcore.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}},
		})
	})
	t.Run("Namespace", func(t *testing.T) {
		roundTrip[upcore.Namespace, corev1.Namespace](t, "Namespace", &upcore.Namespace{ObjectMeta: meta, Status: upcore.NamespaceStatus{Phase: upcore.NamespaceActive}})
	})
	t.Run("Node", func(t *testing.T) {
		roundTrip[upcore.Node, corev1.Node](t, "Node", &upcore.Node{ObjectMeta: meta,
			Spec:   upcore.NodeSpec{PodCIDR: "10.0.0.0/24", PodCIDRs: []string{"10.0.0.0/24", "fd00::/64"}, ProviderID: "p"},
			Status: upcore.NodeStatus{Addresses: []upcore.NodeAddress{{Type: upcore.NodeInternalIP, Address: "192.0.2.1"}, {Type: upcore.NodeHostName, Address: "n"}}}})
	})
	t.Run("Service", func(t *testing.T) {
		roundTrip[upcore.Service, corev1.Service](t, "Service", &upcore.Service{ObjectMeta: meta,
			Spec: upcore.ServiceSpec{
				Ports:    []upcore.ServicePort{{Name: "http", Protocol: tcp, AppProtocol: ptr.To("h2c"), Port: 80, TargetPort: port, NodePort: 30080}, {Port: 53, Protocol: udp, TargetPort: upintstr.FromInt32(5353)}},
				Selector: map[string]string{"app": "web"}, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"},
				Type: upcore.ServiceTypeLoadBalancer, ExternalIPs: []string{"192.0.2.9"}, SessionAffinity: upcore.ServiceAffinityClientIP,
				LoadBalancerIP: "192.0.2.8", LoadBalancerSourceRanges: []string{"192.0.2.0/24"}, ExternalName: "x.example",
				ExternalTrafficPolicy: upcore.ServiceExternalTrafficPolicyLocal, PublishNotReadyAddresses: true,
				SessionAffinityConfig: &upcore.SessionAffinityConfig{ClientIP: &upcore.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}},
				IPFamilies:            []upcore.IPFamily{upcore.IPv4Protocol, upcore.IPv6Protocol}, IPFamilyPolicy: &single,
				InternalTrafficPolicy: &local, TrafficDistribution: ptr.To("PreferClose"),
			},
			Status: upcore.ServiceStatus{LoadBalancer: upcore.LoadBalancerStatus{Ingress: []upcore.LoadBalancerIngress{{IP: "192.0.2.7", Hostname: "lb", IPMode: &proxy}}}},
		})
	})
	t.Run("NetworkPolicy", func(t *testing.T) {
		roundTrip[upnet.NetworkPolicy, networkingv1.NetworkPolicy](t, "NetworkPolicy", &upnet.NetworkPolicy{ObjectMeta: meta,
			Spec: upnet.NetworkPolicySpec{
				PodSelector: upmeta.LabelSelector{MatchLabels: map[string]string{"app": "web"},
					MatchExpressions: []upmeta.LabelSelectorRequirement{{Key: "tier", Operator: upmeta.LabelSelectorOpIn, Values: []string{"a", "b"}}}},
				Ingress: []upnet.NetworkPolicyIngressRule{{Ports: []upnet.NetworkPolicyPort{{Protocol: &tcp, Port: &port}, {Protocol: &udp, Port: ptr.To(upintstr.FromInt32(1000)), EndPort: ptr.To[int32](2000)}},
					From: []upnet.NetworkPolicyPeer{{PodSelector: &upmeta.LabelSelector{}, NamespaceSelector: &upmeta.LabelSelector{MatchLabels: map[string]string{"x": "y"}}}, {IPBlock: &upnet.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}}}}},
				Egress:      []upnet.NetworkPolicyEgressRule{{To: []upnet.NetworkPolicyPeer{{IPBlock: &upnet.IPBlock{CIDR: "0.0.0.0/0"}}}}},
				PolicyTypes: []upnet.PolicyType{upnet.PolicyTypeIngress, upnet.PolicyTypeEgress},
			}})
	})
	t.Run("EndpointSlice", func(t *testing.T) {
		roundTrip[updisc.EndpointSlice, discoveryv1.EndpointSlice](t, "EndpointSlice", &updisc.EndpointSlice{ObjectMeta: meta, AddressType: updisc.AddressTypeIPv4,
			Endpoints: []updisc.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: updisc.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
				Hostname: ptr.To("h"), TargetRef: &upcore.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p", UID: "u"}, NodeName: ptr.To("node"), Zone: ptr.To("z"),
				Hints: &updisc.EndpointHints{ForZones: []updisc.ForZone{{Name: "z"}}, ForNodes: []updisc.ForNode{{Name: "node"}}}}},
			Ports: []updisc.EndpointPort{{Name: ptr.To("http"), Protocol: &tcp, Port: ptr.To[int32](8080), AppProtocol: ptr.To("http")}}})
	})
	t.Run("Status", func(t *testing.T) {
		roundTrip[upmeta.Status, metav1.Status](t, "Status", &upmeta.Status{TypeMeta: upmeta.TypeMeta{Kind: "Status", APIVersion: "v1"},
			ListMeta: upmeta.ListMeta{ResourceVersion: "5"}, Status: upmeta.StatusFailure, Message: "m", Reason: upmeta.StatusReasonExpired, Code: 410,
			Details: &upmeta.StatusDetails{Name: "n", Group: "g", Kind: "k", UID: "u", RetryAfterSeconds: 3,
				Causes: []upmeta.StatusCause{{Type: upmeta.CauseTypeResourceVersionTooLarge, Message: "too large", Field: "f"}}}})
	})
	t.Run("List", func(t *testing.T) {
		roundTrip[upcore.PodList, corev1.PodList](t, "PodList", &upcore.PodList{ListMeta: upmeta.ListMeta{ResourceVersion: "9", Continue: "tok", RemainingItemCount: ptr.To[int64](3)},
			Items: []upcore.Pod{{ObjectMeta: upmeta.ObjectMeta{Name: "a"}}}})
	})
}

// TestUpstreamJSONOfTimes: the two time types write what the upstream ones
// write, and read what they read.
func TestUpstreamJSONOfTimes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ours, up any
	}{
		{"Time", metav1.NewTime(whenMicro), upmeta.NewTime(whenMicro)},
		{"zero Time", metav1.Time{}, upmeta.Time{}},
		{"MicroTime", metav1.NewMicroTime(whenMicro), upmeta.NewMicroTime(whenMicro)},
		{"zero MicroTime", metav1.MicroTime{}, upmeta.MicroTime{}},
	} {
		a, errA := json.Marshal(tc.ours)
		b, errB := json.Marshal(tc.up)
		if errA != nil || errB != nil || string(a) != string(b) {
			t.Errorf("%s: lockstep writes %s (%v), upstream %s (%v)", tc.name, a, errA, b, errB)
		}
	}
	var ours metav1.MicroTime
	if err := json.Unmarshal([]byte(`"2026-11-28T03:04:05.123456Z"`), &ours); err != nil || !ours.Time.Equal(whenMicro) {
		t.Errorf("read MicroTime = %v, %v; want %v", ours, err, whenMicro)
	}
	var bad metav1.Time
	if err := json.Unmarshal([]byte(`"yesterday"`), &bad); err == nil {
		t.Error("read Time from \"yesterday\": no error")
	}
}

// TestParameterCodecMatchesUpstream: options become the query parameters
// the upstream codec makes of them.
func TestParameterCodecMatchesUpstream(t *testing.T) {
	grace := int64(5)
	background := metav1.DeletePropagationBackground
	upBackground := upmeta.DeletePropagationBackground
	for _, tc := range []struct {
		name     string
		ours, up any
	}{
		{"list", &metav1.ListOptions{LabelSelector: "a=b", FieldSelector: "metadata.name=n", Watch: true, AllowWatchBookmarks: true, ResourceVersion: "7",
			ResourceVersionMatch: "NotOlderThan", TimeoutSeconds: ptr.To[int64](30), Limit: 500, Continue: "tok", SendInitialEvents: ptr.To(false)},
			&upmeta.ListOptions{LabelSelector: "a=b", FieldSelector: "metadata.name=n", Watch: true, AllowWatchBookmarks: true, ResourceVersion: "7",
				ResourceVersionMatch: "NotOlderThan", TimeoutSeconds: ptr.To[int64](30), Limit: 500, Continue: "tok", SendInitialEvents: ptr.To(false)}},
		{"empty list", &metav1.ListOptions{}, &upmeta.ListOptions{}},
		{"get", &metav1.GetOptions{ResourceVersion: "0"}, &upmeta.GetOptions{ResourceVersion: "0"}},
		{"create", &metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: "lockstep", FieldValidation: "Strict"},
			&upmeta.CreateOptions{DryRun: []string{upmeta.DryRunAll}, FieldManager: "lockstep", FieldValidation: "Strict"}},
		{"update", &metav1.UpdateOptions{FieldManager: "lockstep"}, &upmeta.UpdateOptions{FieldManager: "lockstep"}},
		{"delete", &metav1.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: &background, DryRun: []string{"All"}},
			&upmeta.DeleteOptions{GracePeriodSeconds: &grace, PropagationPolicy: &upBackground, DryRun: []string{"All"}}},
	} {
		got, err := metav1.ParameterCodec.EncodeParameters(tc.ours.(runtime.Object), schema.GroupVersion{Version: "v1"})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want, err := upmeta.ParameterCodec.EncodeParameters(tc.up.(upruntime.Object), upschema.GroupVersion{Version: "v1"})
		if err != nil {
			t.Fatalf("%s: upstream: %v", tc.name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: parameters %v, upstream %v", tc.name, got, want)
		}
	}
	if _, err := metav1.ParameterCodec.EncodeParameters(&metav1.Status{}, schema.GroupVersion{}); err == nil {
		t.Error("encode a Status as parameters: no error")
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(j)
}

// TestErrorsMatchUpstream: an answer without a Status gets the reason the
// upstream client gives it, and every Is function agrees with upstream's on
// every such answer.
func TestErrorsMatchUpstream(t *testing.T) {
	gr := schema.GroupResource{Group: "lockstep.dev", Resource: "nodeipams"}
	upgr := upschema.GroupResource{Group: "lockstep.dev", Resource: "nodeipams"}
	type is struct {
		name     string
		ours, up func(error) bool
	}
	checks := []is{
		{"IsNotFound", apierrors.IsNotFound, uperrors.IsNotFound},
		{"IsAlreadyExists", apierrors.IsAlreadyExists, uperrors.IsAlreadyExists},
		{"IsConflict", apierrors.IsConflict, uperrors.IsConflict},
		{"IsForbidden", apierrors.IsForbidden, uperrors.IsForbidden},
		{"IsUnauthorized", apierrors.IsUnauthorized, uperrors.IsUnauthorized},
		{"IsGone", apierrors.IsGone, uperrors.IsGone},
		{"IsResourceExpired", apierrors.IsResourceExpired, uperrors.IsResourceExpired},
		{"IsTooManyRequests", apierrors.IsTooManyRequests, uperrors.IsTooManyRequests},
		{"IsInvalid", apierrors.IsInvalid, uperrors.IsInvalid},
	}
	codes := []int{400, 401, 403, 404, 405, 406, 409, 410, 413, 415, 422, 429, 500, 502, 503, 504}
	for _, code := range codes {
		for _, verb := range []string{http.MethodGet, http.MethodPost, http.MethodPut} {
			ours := apierrors.NewGenericServerResponse(code, verb, gr, "n", "body", 1, true)
			up := uperrors.NewGenericServerResponse(code, verb, upgr, "n", "body", 1, true)
			if a, b := mustJSON(t, ours.ErrStatus), mustJSON(t, up.ErrStatus); a != b {
				t.Errorf("%d %s: status\n %s\nupstream\n %s", code, verb, a, b)
			}
			wrapped := fmt.Errorf("update nodeipam n: %w", ours)
			upWrapped := fmt.Errorf("update nodeipam n: %w", up)
			for _, c := range checks {
				if c.ours(wrapped) != c.up(upWrapped) {
					t.Errorf("%d %s: %s = %v, upstream %v", code, verb, c.name, c.ours(wrapped), c.up(upWrapped))
				}
			}
		}
	}
	// A Status the server sent, read as the client reads it: every reason
	// lockstep names, one it does not (an aggregated API's or a proxy's),
	// and none, with every code.
	reasons := []upmeta.StatusReason{"", "SomeProxyReason", upmeta.StatusReasonExpired, upmeta.StatusReasonGone, upmeta.StatusReasonConflict,
		upmeta.StatusReasonAlreadyExists, upmeta.StatusReasonNotFound, upmeta.StatusReasonForbidden, upmeta.StatusReasonUnauthorized,
		upmeta.StatusReasonInvalid, upmeta.StatusReasonTooManyRequests, upmeta.StatusReasonInternalError, upmeta.StatusReasonTimeout, upmeta.StatusReasonStoreReadError}
	for _, reason := range reasons {
		for _, code := range codes {
			up := &uperrors.StatusError{ErrStatus: upmeta.Status{Status: upmeta.StatusFailure, Reason: reason, Code: int32(code)}}
			var st metav1.Status
			if err := json.Unmarshal([]byte(mustJSON(t, up.ErrStatus)), &st); err != nil {
				t.Fatal(err)
			}
			ours := &apierrors.StatusError{ErrStatus: st}
			for _, c := range checks {
				if c.ours(ours) != c.up(up) {
					t.Errorf("Status reason %q code %d: %s = %v, upstream %v", reason, code, c.name, c.ours(ours), c.up(up))
				}
			}
		}
	}
	if apierrors.IsNotFound(errors.New("plain")) {
		t.Error("IsNotFound of a plain error: true")
	}
	if got := apierrors.ReasonForError(apierrors.NewNotFound(gr, "n")); got != metav1.StatusReasonNotFound {
		t.Errorf("ReasonForError(NewNotFound) = %q", got)
	}
}
