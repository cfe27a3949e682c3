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
 * released on another. Dead slots are compacted when the list grows.
 *
 * Scopes left open are reclaimed, never leaked: each thread that opens one
 * gets a record (its innermost scope) in a global list; a thread-exit hook
 * (a pthread key's destructor) ends the scopes of a thread that ends with
 * some open, and tf_shutdown ends every thread's before the devices go. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

struct tf_scope {
    tf_scope *parent;                    /* the scope it was opened inside, on the same thread */
    pthread_mutex_t lock;
    tf_tensor **items;                   /* NULL: released already */
    size_t n, cap;
};

/* One per thread that has opened a scope: its innermost open scope. */
typedef struct thread_scopes {
    tf_scope *innermost;
    struct thread_scopes *prev, *next;   /* in `threads`, under threads_lock */
} thread_scopes;

static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static thread_scopes *threads;
static _Thread_local thread_scopes *mine;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static bool exit_key_made;

static tf_scope *innermost(void) { return mine ? mine->innermost : NULL; }

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

/* Ends rec's scopes from the innermost out to `last` (NULL: all of them). */
static void end_scopes(thread_scopes *rec, const tf_scope *last) {
    for (;;) {
        tf_scope *s = rec->innermost;
        if (!s) return;
        const bool was_last = s == last;
        rec->innermost = s->parent;              /* nothing made while releasing lands in it */
        release_listed(s);
        pthread_mutex_destroy(&s->lock);
        tf__free(s->items);
        tf__free(s);
        if (was_last) return;
    }
}

/* A thread ends: its open scopes end with it (under the list's lock, so a
 * tf_shutdown on another thread does not end them twice). */
static void thread_exit(void *arg) {
    thread_scopes *rec = arg;
    pthread_mutex_lock(&threads_lock);
    end_scopes(rec, NULL);
    if (rec->prev) rec->prev->next = rec->next;
    else threads = rec->next;
    if (rec->next) rec->next->prev = rec->prev;
    pthread_mutex_unlock(&threads_lock);
    if (mine == rec) mine = NULL;
    free(rec);
}

static void make_exit_key(void) { exit_key_made = pthread_key_create(&exit_key, thread_exit) == 0; }

/* This thread's record, made and listed on first use; NULL without memory.
 * Plain malloc: the record lives as long as the thread, past tf_shutdown,
 * outside the library's allocation counts. */
static thread_scopes *my_record(void) {
    if (mine) return mine;
    pthread_once(&exit_key_once, make_exit_key);
    thread_scopes *rec = calloc(1, sizeof *rec);
    if (!rec) return NULL;
    if (!exit_key_made || pthread_setspecific(exit_key, rec) != 0) {
        free(rec);
        return NULL;
    }
    pthread_mutex_lock(&threads_lock);
    rec->next = threads;
    if (threads) threads->prev = rec;
    threads = rec;
    pthread_mutex_unlock(&threads_lock);
    mine = rec;
    return rec;
}

tf_status tf_scope_begin(tf_scope **out) {
    static const char fn[] = "tf_scope_begin";
    if (!out) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    thread_scopes *rec = my_record();
    tf_scope *s = rec ? tf__calloc(1, sizeof *s) : NULL;
    if (!s) return tf__error(TF_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    pthread_mutex_init(&s->lock, NULL);
    s->parent = rec->innermost;
    rec->innermost = s;
    *out = s;
    return TF_OK;
}

tf_status tf_scope_end(tf_scope *scope) {
    static const char fn[] = "tf_scope_end";
    if (!scope) return tf__error(TF_ERR_NULL_ARGUMENT, "%s: scope is NULL", fn);
    tf_scope *s = innermost();
    while (s && s != scope) s = s->parent;
    if (!s) return tf__error(TF_ERR_INVALID_ARGUMENT, "%s: not a scope open on this thread", fn);
    end_scopes(mine, scope);                     /* scopes opened inside it end first */
    return TF_OK;
}

/* At tf_shutdown, before the devices go: every thread's open scopes end
 * (their tensors released; the threads' records stay theirs, emptied). The
 * caller promises no other thread uses the library meanwhile. */
void tf__scope_shutdown(void) {
    pthread_mutex_lock(&threads_lock);
    for (thread_scopes *rec = threads; rec; rec = rec->next) end_scopes(rec, NULL);
    pthread_mutex_unlock(&threads_lock);
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
    tf_scope *s = innermost();
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
