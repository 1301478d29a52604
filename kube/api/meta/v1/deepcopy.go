package v1

import "maps"

// DeepCopyInto copies m into out, sharing nothing.
func (m *ObjectMeta) DeepCopyInto(out *ObjectMeta) {
	*out = *m
	out.CreationTimestamp = m.CreationTimestamp
	out.DeletionTimestamp = m.DeletionTimestamp.DeepCopy()
	if m.DeletionGracePeriodSeconds != nil {
		v := *m.DeletionGracePeriodSeconds
		out.DeletionGracePeriodSeconds = &v
	}
	out.Labels = maps.Clone(m.Labels)
	out.Annotations = maps.Clone(m.Annotations)
	if m.OwnerReferences != nil {
		out.OwnerReferences = make([]OwnerReference, len(m.OwnerReferences))
		for i, r := range m.OwnerReferences {
			r.Controller = copyBool(r.Controller)
			r.BlockOwnerDeletion = copyBool(r.BlockOwnerDeletion)
			out.OwnerReferences[i] = r
		}
	}
	if m.Finalizers != nil {
		out.Finalizers = append([]string(nil), m.Finalizers...)
	}
	if m.ManagedFields != nil {
		out.ManagedFields = make([]ManagedFieldsEntry, len(m.ManagedFields))
		for i, f := range m.ManagedFields {
			f.Time = f.Time.DeepCopy()
			f.FieldsV1 = append([]byte(nil), f.FieldsV1...)
			out.ManagedFields[i] = f
		}
	}
}

// DeepCopy returns a copy of m.
func (m *ObjectMeta) DeepCopy() *ObjectMeta {
	if m == nil {
		return nil
	}
	out := new(ObjectMeta)
	m.DeepCopyInto(out)
	return out
}

// DeepCopyInto copies l into out.
func (l *ListMeta) DeepCopyInto(out *ListMeta) {
	*out = *l
	if l.RemainingItemCount != nil {
		v := *l.RemainingItemCount
		out.RemainingItemCount = &v
	}
}

// DeepCopyInto copies s into out.
func (s *LabelSelector) DeepCopyInto(out *LabelSelector) {
	*out = *s
	out.MatchLabels = maps.Clone(s.MatchLabels)
	if s.MatchExpressions != nil {
		out.MatchExpressions = make([]LabelSelectorRequirement, len(s.MatchExpressions))
		for i, r := range s.MatchExpressions {
			r.Values = append([]string(nil), r.Values...)
			out.MatchExpressions[i] = r
		}
	}
}

// DeepCopy returns a copy of s.
func (s *LabelSelector) DeepCopy() *LabelSelector {
	if s == nil {
		return nil
	}
	out := new(LabelSelector)
	s.DeepCopyInto(out)
	return out
}

func copyBool(b *bool) *bool {
	if b == nil {
		return nil
	}
	v := *b
	return &v
}
