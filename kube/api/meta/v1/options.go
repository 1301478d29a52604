package v1

import (
	"fmt"
	"net/url"
	"strconv"

	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/schema"
	"lockstep.dev/lockstep/kube/api/types"
)

// ListOptions are the query parameters of a list or watch.
type ListOptions struct {
	TypeMeta             `json:",inline"`
	LabelSelector        string `json:"labelSelector,omitempty"`
	FieldSelector        string `json:"fieldSelector,omitempty"`
	Watch                bool   `json:"watch,omitempty"`
	AllowWatchBookmarks  bool   `json:"allowWatchBookmarks,omitempty"`
	ResourceVersion      string `json:"resourceVersion,omitempty"`
	ResourceVersionMatch string `json:"resourceVersionMatch,omitempty"`
	TimeoutSeconds       *int64 `json:"timeoutSeconds,omitempty"`
	Limit                int64  `json:"limit,omitempty"`
	Continue             string `json:"continue,omitempty"`
	SendInitialEvents    *bool  `json:"sendInitialEvents,omitempty"`
}

// GetOptions are the query parameters of a get.
type GetOptions struct {
	TypeMeta        `json:",inline"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// DryRunAll asks the API server to check a write and not make it.
const DryRunAll = "All"

// CreateOptions are the query parameters of a create.
type CreateOptions struct {
	TypeMeta        `json:",inline"`
	DryRun          []string `json:"dryRun,omitempty"`
	FieldManager    string   `json:"fieldManager,omitempty"`
	FieldValidation string   `json:"fieldValidation,omitempty"`
}

// UpdateOptions are the query parameters of an update.
type UpdateOptions struct {
	TypeMeta        `json:",inline"`
	DryRun          []string `json:"dryRun,omitempty"`
	FieldManager    string   `json:"fieldManager,omitempty"`
	FieldValidation string   `json:"fieldValidation,omitempty"`
}

// Preconditions must hold for a delete to happen.
type Preconditions struct {
	UID             *types.UID `json:"uid,omitempty"`
	ResourceVersion *string    `json:"resourceVersion,omitempty"`
}

// NewUIDPreconditions returns preconditions that the object has uid.
func NewUIDPreconditions(uid string) *Preconditions {
	u := types.UID(uid)
	return &Preconditions{UID: &u}
}

// DeletionPropagation says how a delete treats the object's dependents.
type DeletionPropagation string

// The propagation policies of a delete.
const (
	DeletePropagationOrphan     DeletionPropagation = "Orphan"
	DeletePropagationBackground DeletionPropagation = "Background"
	DeletePropagationForeground DeletionPropagation = "Foreground"
)

// DeleteOptions are the body of a delete.
type DeleteOptions struct {
	TypeMeta           `json:",inline"`
	GracePeriodSeconds *int64               `json:"gracePeriodSeconds,omitempty"`
	Preconditions      *Preconditions       `json:"preconditions,omitempty"`
	PropagationPolicy  *DeletionPropagation `json:"propagationPolicy,omitempty"`
	DryRun             []string             `json:"dryRun,omitempty"`
}

// ParameterCodec turns the options above into query parameters.
var ParameterCodec runtime.ParameterCodec = parameterCodec{}

type parameterCodec struct{}

// EncodeParameters returns the query parameters of opts, one of the option
// types of this package.
func (parameterCodec) EncodeParameters(opts runtime.Object, _ schema.GroupVersion) (url.Values, error) {
	v := url.Values{}
	set := func(key, value string) {
		if value != "" {
			v.Set(key, value)
		}
	}
	setBool := func(key string, value bool) {
		if value {
			v.Set(key, "true")
		}
	}
	switch o := opts.(type) {
	case *ListOptions:
		set("labelSelector", o.LabelSelector)
		set("fieldSelector", o.FieldSelector)
		setBool("watch", o.Watch)
		setBool("allowWatchBookmarks", o.AllowWatchBookmarks)
		set("resourceVersion", o.ResourceVersion)
		set("resourceVersionMatch", o.ResourceVersionMatch)
		if o.TimeoutSeconds != nil {
			v.Set("timeoutSeconds", strconv.FormatInt(*o.TimeoutSeconds, 10))
		}
		if o.Limit != 0 {
			v.Set("limit", strconv.FormatInt(o.Limit, 10))
		}
		set("continue", o.Continue)
		if o.SendInitialEvents != nil {
			v.Set("sendInitialEvents", strconv.FormatBool(*o.SendInitialEvents))
		}
	case *GetOptions:
		set("resourceVersion", o.ResourceVersion)
	case *CreateOptions:
		for _, d := range o.DryRun {
			v.Add("dryRun", d)
		}
		set("fieldManager", o.FieldManager)
		set("fieldValidation", o.FieldValidation)
	case *UpdateOptions:
		for _, d := range o.DryRun {
			v.Add("dryRun", d)
		}
		set("fieldManager", o.FieldManager)
		set("fieldValidation", o.FieldValidation)
	case *DeleteOptions:
		for _, d := range o.DryRun {
			v.Add("dryRun", d)
		}
		if o.GracePeriodSeconds != nil {
			v.Set("gracePeriodSeconds", strconv.FormatInt(*o.GracePeriodSeconds, 10))
		}
		if o.PropagationPolicy != nil {
			v.Set("propagationPolicy", string(*o.PropagationPolicy))
		}
	default:
		return nil, fmt.Errorf("encode query parameters: %T is not a request option", opts)
	}
	return v, nil
}
