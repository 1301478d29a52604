/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* The work area of a new translated connection and of a translated ICMP
 * error, one per CPU: the programs' stack, 512 bytes for all their frames
 * together, cannot hold it beside the rest. tc programs do not nest on a
 * CPU, so one program run uses it at a time. Not pinned: nothing outside
 * a program run reads it.
 */
#ifndef LOCKSTEP_SCRATCH_H
#define LOCKSTEP_SCRATCH_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "parse.h"

struct svc_scratch {
	struct pkt t;   /* the packet as translated */
	struct pkt in;  /* the packet an ICMP error quotes */
	struct ct_key k;
	struct svc_ct_entry n;
	struct backend_value b;
	struct affinity_key ak;
	struct affinity_value av;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct svc_scratch);
} lockstep_svc_scratch SEC(".maps");

static __always_inline struct svc_scratch *svc_scratch(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&lockstep_svc_scratch, &zero);
}

#endif /* LOCKSTEP_SCRATCH_H */
