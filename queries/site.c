/* site: which frame of a stack names it for a person.
 *
 * A stack's leaf is where the allocator was called, which on most stacks is
 * the allocator's own machinery: operator new, std::allocator, malloc called
 * by strdup, a program's xmalloc. The site is the frame a user thinks of:
 *
 *   - when the stack has Python frames, the innermost of them (the script's
 *     line; the interpreter's C frames below it are its machinery);
 *   - else the first frame, from the leaf, outside the allocation machinery:
 *     the C library's allocators, operator new/delete, the standard
 *     library's allocator classes, the wrappers listed by default and by the
 *     user (HEAPSTORE_ALLOC_WRAPPERS, the wrappers= parameter) and, in the
 *     default mode, the rest of the C++ standard library's internals
 *     (std::, __gnu_cxx::: _Rb_tree::_M_create_node, basic_string::_M_mutate,
 *     vector::_M_realloc_insert…), so that a std::map insert is charged to
 *     the function that inserted;
 *   - the leaf when every frame is machinery.
 *
 * Modes (site=): user (the above), alloc (only allocators and wrappers are
 * machinery: the standard library's containers stay sites), leaf (the old
 * rule: the leaf frame). Every view that names a site asks hs__site, which
 * caches the answer per trace for the connection's current rules.
 *
 * Frames also get their display name here: the compiler's clone suffixes
 * (.constprop.0, .part.0, .isra.0, .cold, " [clone .constprop.0]") are
 * removed so that one function is one name, whichever copies gcc made; and
 * their one label, "name (file.c:12)" (hs_frame_label), for the answers and
 * the CLI's tables alike.
 *
 * Under q.c: this file reads the store and q's caches but calls nothing of
 * q.c (the per-trace hs__site, which reads a trace's stack, is q.c's).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hs_error.h"
#include "q_internal.h"

/* ---- names ------------------------------------------------------------------ */

static int is_digits(const char *b, const char *e)
{
    if (b == e) return 0;
    for (; b < e; b++)
        if (*b < '0' || *b > '9') return 0;
    return 1;
}

/* gcc's and clang's suffixes for the copies they make of a function. */
static const char *const clone_kinds[] = {"constprop",  "part", "isra",  "cold",       "lto_priv",
                                          "localalias", "llvm", "clone", "specialized"};

/* Length of s[0..n) without one trailing ".kind[.N]" clone suffix, or n. */
static size_t strip_dot_clone(const char *s, size_t n)
{
    const char *end = s + n, *dot = NULL;
    for (const char *c = end; c > s; c--)
        if (c[-1] == '.') {
            dot = c - 1;
            break;
        }
    if (!dot || dot == s) return n;
    /* ".N" after a kind: look one dot further */
    if (is_digits(dot + 1, end)) {
        const char *d2 = NULL;
        for (const char *c = dot; c > s; c--)
            if (c[-1] == '.') {
                d2 = c - 1;
                break;
            }
        if (!d2 || d2 == s) return n;
        for (size_t k = 0; k < HS_COUNTOF(clone_kinds); k++)
            if ((size_t)(dot - d2 - 1) == strlen(clone_kinds[k]) &&
                !strncmp(d2 + 1, clone_kinds[k], (size_t)(dot - d2 - 1)))
                return (size_t)(d2 - s);
        return n;
    }
    for (size_t k = 0; k < HS_COUNTOF(clone_kinds); k++)
        if ((size_t)(end - dot - 1) == strlen(clone_kinds[k]) &&
            !strncmp(dot + 1, clone_kinds[k], (size_t)(end - dot - 1)))
            return (size_t)(dot - s);
    return n;
}

char *hs__fn_name(const char *function, int python)
{
    size_t n = strlen(function);
    char *out = malloc(n + 1);
    if (!out) return NULL;
    /* " [clone .constprop.0]" anywhere (demangled C++), each one dropped */
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        if (!python && !strncmp(function + i, " [clone .", 9)) {
            const char *close = strchr(function + i, ']');
            if (close) {
                i = (size_t)(close - function) + 1;
                continue;
            }
        }
        out[w++] = function[i++];
    }
    out[w] = '\0';
    /* "name.constprop.0.isra.0": a C name has no dot of its own (a Python
     * qualified name has, and keeps them) */
    if (!python && !strchr(out, '(')) {
        size_t m;
        while ((m = strip_dot_clone(out, w)) != w) w = m;
        out[w] = '\0';
    }
    return out;
}

int hs_frame_label(char *buf, size_t len, const char *name, const char *file, int64_t line)
{
    if (!file || !*file) return snprintf(buf, len, "%s", name);
    const char *base = strrchr(file, '/');
    return snprintf(buf, len, "%s (%s:%" PRId64 ")", name, base ? base + 1 : file, line);
}

/* The qualified name of a demangled function, [*b, *e): what precedes its
 * parameter list, less a return type ("void std::vector<…>::_M_realloc_insert<…>"
 * gives "std::vector<…>::_M_realloc_insert<…>"). A C name is itself. */
static void qualname(const char *s, const char **b, const char **e)
{
    int depth = 0;
    const char *start = s, *c = s;
    while (*c) {
        if (!strncmp(c, "(anonymous namespace)", 21)) {
            c += 21;
            continue;
        }
        if (depth == 0 && !strncmp(c, "operator", 8) && (c == s || c[-1] == ':' || c[-1] == ' ') &&
            !(c[8] == '_' || (c[8] >= 'a' && c[8] <= 'z') || (c[8] >= 'A' && c[8] <= 'Z') ||
              (c[8] >= '0' && c[8] <= '9'))) {
            c += 8;
            if (*c == ' ') { /* operator new[], operator delete, conversions */
                c++;
                while (*c && *c != '(' && *c != '<') c++;
            } else {
                /* the longest operator token: "operator+<char>" is operator+
                 * with template arguments, "operator<< <char>" operator<< */
                static const char *const ops[] = {
                    "<<=", ">>=", "<=>", "->*", "<<", ">>", "<=", ">=", "==", "!=",
                    "&&",  "||",  "++",  "--",  "->", "+=", "-=", "*=", "/=", "%=",
                    "^=",  "&=",  "|=",  "()",  "[]", "+",  "-",  "*",  "/",  "%",
                    "^",   "&",   "|",   "~",   "!",  "=",  "<",  ">",  ","};
                for (size_t k = 0; k < HS_COUNTOF(ops); k++)
                    if (!strncmp(c, ops[k], strlen(ops[k]))) {
                        c += strlen(ops[k]);
                        break;
                    }
            }
            if (c[0] == ' ' && c[1] == '<') c++; /* "operator< <char>": its template arguments */
            continue;
        }
        switch (*c) {
        case '<':
        case '{':
        case '[':
            depth++;
            break;
        case '>':
        case '}':
        case ']':
            if (depth) depth--;
            break;
        case '(':
            if (depth == 0) {
                *b = start;
                *e = c;
                return;
            }
            depth++;
            break;
        case ')':
            if (depth) depth--;
            break;
        case ' ':
            if (depth == 0) start = c + 1;
            break;
        }
        c++;
    }
    *b = start;
    *e = c;
}

static int starts(const char *b, const char *e, const char *prefix)
{
    size_t n = strlen(prefix);
    return (size_t)(e - b) >= n && !strncmp(b, prefix, n);
}

static int equals(const char *b, const char *e, const char *word)
{
    return (size_t)(e - b) == strlen(word) && !strncmp(b, word, (size_t)(e - b));
}

/* The C library's allocation functions and the names glibc gives them inside. */
static const char *const c_allocators[] = {
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "free",
    "cfree",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "strdup",
    "strndup",
    "wcsdup",
    "__strdup",
    "__strndup",
    "__wcsdup",
    "asprintf",
    "vasprintf",
    "__asprintf",
    "__vasprintf",
    "___asprintf",
    "__vasprintf_internal",
    "__libc_malloc",
    "__libc_calloc",
    "__libc_realloc",
    "__libc_free",
    "__libc_memalign",
    "__libc_valloc",
    "__libc_pvalloc",
    "__posix_memalign",
    "_mid_memalign",
    "_int_malloc",
    "_int_realloc",
    "_int_memalign",
    "sysmalloc",
    "tcache_init",
    "malloc_hook_ini",
    "__libc_reallocarray",
};

/* Wrappers found in many programs (GNU's xmalloc family, GLib, Python's C
 * API raw allocators); the user adds more. A trailing '*' matches a prefix. */
static const char *const default_wrappers[] = {
    "xmalloc",
    "xcalloc",
    "xrealloc",
    "xreallocarray",
    "xstrdup",
    "xstrndup",
    "xmemdup",
    "xzalloc",
    "xnmalloc",
    "xnrealloc",
    "x2realloc",
    "x2nrealloc",
    "xcharalloc",
    "ximemdup",
    "g_malloc",
    "g_malloc0",
    "g_realloc",
    "g_try_malloc",
    "g_try_malloc0",
    "g_try_realloc",
    "g_malloc_n",
    "g_malloc0_n",
    "g_realloc_n",
    "g_strdup",
    "g_strndup",
    "g_memdup",
    "g_memdup2",
    "g_slice_alloc",
    "g_slice_alloc0",
    "g_new",
    "g_new0",
    "PyMem_RawMalloc",
    "PyMem_RawCalloc",
    "PyMem_RawRealloc",
    "PyMem_Malloc",
    "PyMem_Calloc",
    "PyMem_Realloc",
    "PyObject_Malloc",
    "PyObject_Calloc",
    "PyObject_Realloc",
    "_PyObject_Malloc",
    "_PyObject_Calloc",
    "_PyObject_Realloc",
    "_PyMem_RawMalloc",
    "_PyMem_RawCalloc",
    "_PyMem_RawRealloc",
};

/* The standard library's allocator classes (machinery in every mode but leaf). */
static const char *const cxx_allocators[] = {
    "std::allocator<",
    "std::allocator_traits<",
    "std::__new_allocator<",
    "__gnu_cxx::new_allocator<",
    "__gnu_cxx::__alloc_traits<",
    "std::__allocated_ptr<",
    "std::__allocate_guarded<",
    "std::pmr::",
};

void hs__frame_classify(hs__frame *f)
{
    f->python = !f->module[0] && f->function[0];
    f->machinery = 0;
    if (f->python || !f->name[0]) return;
    const char *b, *e;
    qualname(f->name, &b, &e);
    if (starts(b, e, "::")) b += 2;
    if (starts(b, e, "__GI_")) b += 5;
    if (starts(b, e, "operator new") || starts(b, e, "operator delete")) {
        f->machinery = HS_MACH_ALLOC;
        return;
    }
    for (size_t i = 0; i < HS_COUNTOF(c_allocators); i++)
        if (equals(b, e, c_allocators[i])) {
            f->machinery = HS_MACH_ALLOC;
            return;
        }
    for (size_t i = 0; i < HS_COUNTOF(cxx_allocators); i++)
        if (starts(b, e, cxx_allocators[i])) {
            f->machinery = HS_MACH_ALLOC;
            return;
        }
    if (starts(b, e, "std::") || starts(b, e, "__gnu_cxx::") || starts(b, e, "__cxxabiv1::"))
        f->machinery = HS_MACH_STDLIB;
}

/* 1 when the frame's function is in the comma-separated list (an entry
 * ending in '*' matches a prefix); a C++ name matches by its qualified name. */
static int in_list(const char *list, const char *b, const char *e)
{
    for (const char *p = list; p && *p;) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        while (l && *p == ' ') p++, l--;
        while (l && p[l - 1] == ' ') l--;
        if (l && p[l - 1] == '*') {
            if ((size_t)(e - b) >= l - 1 && !strncmp(b, p, l - 1)) return 1;
        } else if (l && (size_t)(e - b) == l && !strncmp(b, p, l)) {
            return 1;
        }
        p = c ? c + 1 : p + l;
        if (!c) break;
    }
    return 0;
}

static int is_wrapper(const hs_q *q, const hs__frame *f)
{
    if (f->python || !f->name[0]) return 0;
    const char *b, *e;
    qualname(f->name, &b, &e);
    for (size_t i = 0; i < HS_COUNTOF(default_wrappers); i++)
        if (equals(b, e, default_wrappers[i])) return 1;
    return in_list(q->site_wrappers, b, e);
}

/* ---- rules and the caches ---------------------------------------------------- */

/* trace -> site frame, and frame id -> its class under the rules (FB_*),
 * each about 32 B an entry: kept between requests up to the KEEP sizes
 * (hs__site_trim, a few MB), the classes started again within a request
 * past SITE_CLASS_MAX. A stack's every frame is
 * classified, but only the site's frame is read into the frame cache
 * (about 270 B a frame, and the views stop taking stacks when it is full). */
#define SITE_CACHE_KEEP (64u << 10)
#define SITE_CLASS_KEEP (64u << 10)
#define SITE_CLASS_MAX  (512u << 10)
#define FB_PYTHON       1u
#define FB_MACHINERY    2u /* under the current mode and wrappers */

static void site_cache_clear(hs_q *q)
{
    hs__map_free(&q->site_cache);
    hs__map_free(&q->site_class);
}

int hs_site_rules_parse(hs_site_rules *out, const char *site, const char *wrappers, hs_qerr *err)
{
    int mode = !site || !strcmp(site, "user") ? HS_SITE_USER
               : !strcmp(site, "alloc")       ? HS_SITE_ALLOC
               : !strcmp(site, "leaf")        ? HS_SITE_LEAF
                                              : -1;
    if (mode < 0)
        return hs__err(err, HS_EINVAL, "site must be user, alloc or leaf (not '%s')", site);
    out->mode = mode;
    out->wrappers = wrappers;
    return 0;
}

int hs__site_apply(hs_q *q, const hs_site_rules *r, hs_qerr *err)
{
    const char *env = getenv("HEAPSTORE_ALLOC_WRAPPERS");
    const char *req = r->wrappers;
    char w[sizeof q->site_wrappers];
    int n = snprintf(w, sizeof w, "%s%s%s", env ? env : "", env && req ? "," : "", req ? req : "");
    if (n < 0 || (size_t)n >= sizeof w)
        return hs__err(err, HS_EINVAL, "the wrappers listed are longer than %zu bytes",
                       sizeof w - 1);
    if (r->mode != q->site_mode || strcmp(w, q->site_wrappers)) {
        site_cache_clear(q);
        q->site_mode = r->mode;
        memcpy(q->site_wrappers, w, (size_t)n + 1);
    }
    return 0;
}

int hs__site_trim(hs_q *q)
{
    if (q->site_cache.count <= SITE_CACHE_KEEP && q->site_class.count <= SITE_CLASS_KEEP) return 0;
    site_cache_clear(q);
    return 1;
}

static unsigned frame_class(const hs_q *q, const hs__frame *f)
{
    if (f->python) return FB_PYTHON;
    int mach = f->machinery == HS_MACH_ALLOC ||
               (f->machinery == HS_MACH_STDLIB && q->site_mode == HS_SITE_USER) || is_wrapper(q, f);
    return mach ? FB_MACHINERY : 0;
}

/* FB_* of frame id, or a negative HS_E code. A frame not in the frame
 * cache is read (function and module) without being kept there. */
static int frame_bits(hs_q *q, int64_t id, hs_qerr *err)
{
    uint64_t v;
    if (hs__map_get(&q->site_class, (uint64_t)id, &v)) return (int)v;
    unsigned bits = 0;
    if (hs__map_get(&q->frame_idx, (uint64_t)id, &v)) {
        bits = frame_class(q, q->frames[v]);
    } else {
        hs_qstore_frame sf;
        int rc = q->store->ops->frame(q->store, id, &sf, err);
        if (rc) return rc;
        hs__frame f = {.function = (char *)sf.function, .module = (char *)sf.module};
        f.name = hs__fn_name(f.function, !f.module[0]);
        if (!f.name) return hs__err(err, HS_ENOMEM, "out of memory");
        hs__frame_classify(&f);
        bits = frame_class(q, &f);
        free(f.name);
    }
    if (q->site_class.count >= SITE_CLASS_MAX) hs__map_free(&q->site_class);
    (void)hs__map_put(&q->site_class, (uint64_t)id, bits); /* else asked again */
    return (int)bits;
}

int hs__site_of(hs_q *q, const int64_t *frames, int depth, hs_qerr *err)
{
    if (depth <= 0 || q->site_mode == HS_SITE_LEAF) return 0;
    int site = -1;
    for (int k = 0; k < depth; k++) {
        int b = frame_bits(q, frames[k], err);
        if (b < 0) return b;
        if (b & FB_PYTHON) return k;
        if (site < 0 && !(b & FB_MACHINERY)) site = k;
    }
    return site < 0 ? 0 : site;
}

int hs__site_index(hs_q *q, int64_t trace, const int64_t *frames, int depth, hs_qerr *err)
{
    if (depth <= 0) return 0;
    uint64_t v;
    if (!hs__map_get(&q->site_cache, (uint64_t)trace, &v)) {
        int k = hs__site_of(q, frames, depth, err);
        if (k >= 0) (void)hs__map_put(&q->site_cache, (uint64_t)trace, (uint64_t)frames[k]);
        return k;
    }
    int64_t f = (int64_t)v;
    /* the first occurrence from the leaf: a frame nearer the leaf with the
     * same id would have been the site already */
    for (int k = 0; k < depth; k++)
        if (frames[k] == f) return k;
    return 0;
}
