// A C++ call site for test_symbols: its pc must come back demangled.
#include <stdint.h>

extern "C" __attribute__((noinline)) uint64_t sym_ret_addr(void);

namespace hs_t
{
template <class T> struct Widget {
    __attribute__((noinline)) static uint64_t grow(int *line);
};
template <class T> uint64_t Widget<T>::grow(int *line)
{
    *line = __LINE__ + 1;
    uint64_t pc = sym_ret_addr();
    return pc;
}
} // namespace hs_t

extern "C" uint64_t sym_cxx_site(int *line)
{
    return hs_t::Widget<long>::grow(line);
}
