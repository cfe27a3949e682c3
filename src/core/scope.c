/* Scopes: every tensor record made on a thread while a scope is open there
 * (op results, views, loads, internal temporaries alike) is listed in that
 * thread's innermost scope, which owns the reference the tensor was made
 * with. Ending the scope releases, for each listed tensor still alive, that
 * one reference; a tensor released to zero before then leaves its scope's
 * list (tf_tensor_release clears its slot), and one the caller retained
 * survives with the caller's reference. So a forward pass opens a scope,
 * retains what it returns, and ends the scope instead of releasing each
 * temporary by hand.
 *
 * Lists are per scope under a mutex: a tensor made on this thread may be
 * released on another. Dead slots are compacted when the list grows. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

struct tf_scope {
    tf_scope *parent;                    /* the scope it was opened inside, on the same thread */
    pthread_mutex_t lock;
    tf_tensor **items;                   /* NULL: released already */
    size_t n, cap;
};

static _Thread_local tf_scope *innermost;

tf_status tf_scope_begin(tf_scope **out) {
    static const char fn[] = "tf_scope_begin";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    tf_scope *s = tf__calloc(1, sizeof *s);
    if (!s) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    pthread_mutex_init(&s->lock, NULL);
    s->parent = innermost;
    innermost = s;
    *out = s;
    return TF_OK;
}

static void release_listed(tf_scope *s) {
    for (;;) {                                   /* releasing may end other listed tensors: take one at a time */
        pthread_mutex_lock(&s->lock);
        tf_tensor *t = NULL;
        while (s->n && !(t = s->items[s->n - 1])) s->n--;
        if (t) {
            s->items[--s->n] = NULL;
            t->scope = NULL;                     /* the scope's reference goes now; the tensor is no longer listed */
        }
        pthread_mutex_unlock(&s->lock);
        if (!t) return;
        tf_tensor_release(t);
    }
}

tf_status tf_scope_end(tf_scope *scope) {
    static const char fn[] = "tf_scope_end";
    if (!scope) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: scope is NULL", fn);
    tf_scope *s = innermost;
    while (s && s != scope) s = s->parent;
    if (!s) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: not a scope open on this thread", fn);
    for (;;) {                                   /* scopes opened inside it end first */
        s = innermost;
        const bool last = s == scope;
        innermost = s->parent;                   /* nothing made while releasing lands in it */
        release_listed(s);
        pthread_mutex_destroy(&s->lock);
        tf__free(s->items);
        tf__free(s);
        if (last) return TF_OK;
    }
}

/* Room for one more: compact the released slots first, then grow. */
static bool make_room(tf_scope *s) {
    if (s->n < s->cap) return true;
    size_t kept = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->items[i]) {
            s->items[kept] = s->items[i];
            s->items[kept]->scope_slot = kept;
            kept++;
        }
    s->n = kept;
    if (s->n < s->cap / 2 + 1 && s->cap) return true;
    size_t cap = s->cap ? 2 * s->cap : 64;
    tf_tensor **grown = tf__malloc(cap * sizeof *grown);
    if (!grown) return false;
    if (s->n) memcpy(grown, s->items, s->n * sizeof *grown);
    tf__free(s->items);
    s->items = grown;
    s->cap = cap;
    return true;
}

bool tf__scope_adopt(tf_tensor *t) {
    tf_scope *s = innermost;
    if (!s) return true;
    pthread_mutex_lock(&s->lock);
    bool ok = make_room(s);
    if (ok) {
        t->scope = s;
        t->scope_slot = s->n;
        s->items[s->n++] = t;
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

void tf__scope_forget(tf_tensor *t) {
    tf_scope *s = t->scope;
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    if (t->scope == s && t->scope_slot < s->n && s->items[t->scope_slot] == t) s->items[t->scope_slot] = NULL;
    t->scope = NULL;
    pthread_mutex_unlock(&s->lock);
}
