package fields

import "testing"

func TestOneTermEqualSelector(t *testing.T) {
	for _, tc := range []struct{ field, value, want string }{
		{"metadata.name", "node-a", "metadata.name=node-a"},
		{"spec.nodeName", `a,b=c\d`, `spec.nodeName=a\,b\=c\\d`},
		{"metadata.name", "", "metadata.name="},
	} {
		if got := OneTermEqualSelector(tc.field, tc.value).String(); got != tc.want {
			t.Errorf("OneTermEqualSelector(%q, %q) = %q, want %q", tc.field, tc.value, got, tc.want)
		}
	}
}
