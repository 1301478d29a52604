package store

import (
	"net/netip"
	"testing"
)

func TestBlocksTable(t *testing.T) {
	s := mustStore(t)
	blocks := []*Block{
		{Name: "10.244.0.0/26", CIDR: netip.MustParsePrefix("10.244.0.0/26"), IPPool: "default", Owner: "uid-a", State: BlockActive},
		{Name: "10.244.0.64/26", CIDR: netip.MustParsePrefix("10.244.0.64/26"), IPPool: "default", Owner: "uid-a", State: BlockQuarantined},
		{Name: "fd00::/120", CIDR: netip.MustParsePrefix("fd00::/120"), IPPool: "v6", Owner: "uid-a", State: BlockRetired},
	}
	commit(t, s, func(txn *Txn) error {
		for _, b := range blocks {
			if err := UpsertBlock(txn, b); err != nil {
				return err
			}
		}
		return nil
	})
	read := s.ReadTxn()
	got, err := Blocks(read, nil)
	if err != nil || len(got) != 3 {
		t.Fatalf("Blocks: %d rows, %v; want 3", len(got), err)
	}
	created := got[0].CreateRevision
	tests := []struct {
		name string
		want *Block
	}{
		{"10.244.0.0/26", blocks[0]},
		{"10.244.0.64/26", blocks[1]},
		{"fd00::/120", blocks[2]},
		{"10.244.0.0/2", nil}, // a prefix of a name is not a name
		{"10.244.1.0/26", nil},
	}
	for _, tc := range tests {
		b, err := BlockByName(read, nil, tc.name)
		switch {
		case err != nil:
			t.Errorf("BlockByName(%s): %v", tc.name, err)
		case (b == nil) != (tc.want == nil):
			t.Errorf("BlockByName(%s) = %v, want %v", tc.name, b, tc.want)
		case b != nil && (b.State != tc.want.State || b.Owner != tc.want.Owner || b.CIDR != tc.want.CIDR):
			t.Errorf("BlockByName(%s) = %+v, want %+v", tc.name, b, tc.want)
		}
	}

	// A change keeps the creation revision; a delete of a missing block
	// is not an error.
	commit(t, s, func(txn *Txn) error {
		b := *blocks[0]
		b.State = BlockQuarantined
		if err := UpsertBlock(txn, &b); err != nil {
			return err
		}
		if err := DeleteBlock(txn, "fd00::/120"); err != nil {
			return err
		}
		return DeleteBlock(txn, "fd00::/120")
	})
	read = s.ReadTxn()
	b, _ := BlockByName(read, nil, "10.244.0.0/26")
	if b.State != BlockQuarantined || b.CreateRevision != created || b.ModifyRevision <= created {
		t.Errorf("after update: %+v (created at %d)", b, created)
	}
	if b, _ := BlockByName(read, nil, "fd00::/120"); b != nil {
		t.Error("deleted block is still there")
	}
}

func TestBlockNameIsItsCIDR(t *testing.T) {
	s := mustStore(t)
	for _, b := range []*Block{
		{Name: "10.244.0.0/26", CIDR: netip.MustParsePrefix("10.244.0.0/25")},
		{Name: "10.244.0.1/26", CIDR: netip.MustParsePrefix("10.244.0.1/26")},
		{Name: "10.244.0.0/26", CIDR: netip.MustParsePrefix("10.244.0.1/26")},
		{Name: "", CIDR: netip.MustParsePrefix("10.244.0.0/26")},
	} {
		txn := s.WriteTxn()
		if err := UpsertBlock(txn, b); err == nil {
			t.Errorf("UpsertBlock(%q, %s) accepted", b.Name, b.CIDR)
		}
		txn.Abort()
	}
}

func TestBlockStateText(t *testing.T) {
	for st := BlockActive; st <= BlockRetired; st++ {
		got, err := ParseBlockState(st.String())
		if err != nil || got != st {
			t.Errorf("ParseBlockState(%q) = %v, %v", st.String(), got, err)
		}
	}
	if _, err := ParseBlockState("draining"); err == nil {
		t.Error("unknown state accepted")
	}
}
