/* The fusion pass over a captured graph (graph_fusion.c), called by
 * tf_graph_end on the recorded nodes before they are first replayed. */
#ifndef TF_ENGINE_GRAPH_FUSION_H
#define TF_ENGINE_GRAPH_FUSION_H

#include "engine.h"

/* One recorded op: the public call that made it, whether the device runs it
 * itself (else dispatch runs it: its parts, or the CPU fallback). */
typedef struct graph_node {
    const char *fn;
    bool native;
    tf_op op;
} graph_node;

/* Whether nothing outside the graph's later nodes can read the bytes of d
 * once the capture ended: the user released every tensor on its buffer,
 * and no index guard reads them. graph.c answers from its buffer records. */
typedef bool (*tf__bytes_dead_fn)(void *ctx, const tf_tensor_desc *d);

/* Rewrites nodes[0, n) in place, adjacent pairs that a pattern fuses into
 * one node where the device runs the fused op itself; returns the new
 * count. new_index[i] gets the node that old node i went into (for the
 * graph's guards). TF_GRAPH_FUSION=0 turns the pass off. */
int tf__graph_fuse(tf_device *dev, graph_node *nodes, int n, tf__bytes_dead_fn dead, void *ctx, int *new_index);

#endif /* TF_ENGINE_GRAPH_FUSION_H */
