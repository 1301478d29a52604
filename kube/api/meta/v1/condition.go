package v1

// ConditionStatus is whether a condition holds.
type ConditionStatus string

// The statuses of a condition.
const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// Condition is one aspect of an object's state, as the API's conditions
// are written.
type Condition struct {
	// +required
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$`
	// +kubebuilder:validation:MaxLength=316
	Type string `json:"type"`
	// +required
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status ConditionStatus `json:"status"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +required
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=date-time
	LastTransitionTime Time `json:"lastTransitionTime"`
	// +required
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`
	Reason string `json:"reason"`
	// +required
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MaxLength=32768
	Message string `json:"message"`
}

// DeepCopyInto copies c into out.
func (c *Condition) DeepCopyInto(out *Condition) { *out = *c }

// FindStatusCondition returns the condition of type t, or nil.
func FindStatusCondition(conditions []Condition, t string) *Condition {
	for i := range conditions {
		if conditions[i].Type == t {
			return &conditions[i]
		}
	}
	return nil
}

// SetStatusCondition sets c in conditions, keeping the transition time
// when the status does not change (now when c has none), and reports
// whether anything changed.
func SetStatusCondition(conditions *[]Condition, c Condition) bool {
	if conditions == nil {
		return false
	}
	old := FindStatusCondition(*conditions, c.Type)
	if old == nil {
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = Now()
		}
		*conditions = append(*conditions, c)
		return true
	}
	changed := false
	if old.Status != c.Status {
		old.Status = c.Status
		if c.LastTransitionTime.IsZero() {
			old.LastTransitionTime = Now()
		} else {
			old.LastTransitionTime = c.LastTransitionTime
		}
		changed = true
	}
	if old.Reason != c.Reason {
		old.Reason, changed = c.Reason, true
	}
	if old.Message != c.Message {
		old.Message, changed = c.Message, true
	}
	if old.ObservedGeneration != c.ObservedGeneration {
		old.ObservedGeneration, changed = c.ObservedGeneration, true
	}
	return changed
}
