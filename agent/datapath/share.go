package datapath

// ConntrackShare is one endpoint's use of its conntrack share (see
// ctshare.go): the entries it may hold in lockstep_ct and lockstep_svc_ct
// together, maps.CTShareLimit.
type ConntrackShare struct {
	// Entries is the programs' estimate of the entries the endpoint holds
	// (never below the truth, and brought down to it every reclaim).
	Entries uint64
	// Refused counts its new connections dropped at its share.
	Refused uint64
}
