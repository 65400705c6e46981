// C++ workload: new/delete reach malloc/free through libstdc++. Prints
// "site NAME LINE ALLOCS ALLOC_BYTES FREES FREED_BYTES" like wl_sites.c, with
// NAME the demangled function that calls operator new. argv[1]: divisor,
// argv[2]: multiplier (default 1).
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#define AT(var, expr) (var = __LINE__, (expr))

namespace ws
{
int l_node, l_array, l_shared;

struct Node {
    char pad[48];
    Node *next;
};

template <typename T> struct Box {
    T value[25];
};

__attribute__((noinline)) Node *make_node()
{
    return AT(l_node, new Node());
}

__attribute__((noinline)) char *make_array(std::size_t n)
{
    return AT(l_array, new char[n]);
}

__attribute__((noinline)) Box<double> *make_box(int)
{
    return AT(l_shared, new Box<double>());
}
} // namespace ws

static void *volatile sink;

int main(int argc, char **argv)
{
    unsigned long s = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1;
    if (!s) s = 1;
    unsigned long k = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 1;
    unsigned long n = 20000 * (k ? k : 1) / s + 10;
    ws::Node *head = nullptr;
    for (unsigned long i = 0; i < n; i++) {
        ws::Node *x = ws::make_node();
        x->next = head;
        head = x;
    }
    for (unsigned long i = 0; i < n; i++) {
        char *a = ws::make_array(777);
        if (i % 4)
            delete[] a;
        else
            sink = a;
    }
    for (unsigned long i = 0; i < n; i++) delete ws::make_box(1);
    std::vector<std::string> v;
    for (int i = 0; i < 1000; i++) v.push_back(std::string(100, 'x'));
    std::printf("site ws::make_node() %d %lu %lu 0 0\n", ws::l_node, n, n * sizeof(ws::Node));
    unsigned long freed = n - (n + 3) / 4;
    std::printf("site ws::make_array(unsigned long) %d %lu %lu %lu %lu\n", ws::l_array, n, n * 777,
                freed, freed * 777);
    std::printf("site ws::make_box(int) %d %lu %lu %lu %lu\n", ws::l_shared, n,
                n * sizeof(ws::Box<double>), n, n * sizeof(ws::Box<double>));
    return 0;
}
