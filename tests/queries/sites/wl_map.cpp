// wl_map: a C++ program whose two functions leak known bytes through
// std::map<std::string, std::string> and std::string (libstdc++'s
// out-of-line _M_create/_M_mutate, the map's _M_emplace_unique and the
// vector's _M_realloc_insert), built with -O2 so the containers' internals
// are what stands between operator new and the user's functions.
//
// Per round (ROUNDS of them, ROUND_MS apart):
//   leak_index: 50 entries, each a 96 B map node, a key of 20 chars grown by
//               50 (libstdc++ doubles to capacity 70: a 71 B block, its 21 B
//               first block freed) and a value of 300 chars (301 B):
//               468 B an entry, 23,400 B a round;
//   leak_names: 50 strings of 1000 chars (1001 B each) pushed on a vector
//               whose buffer doubles (32 B an element): 50,050 B a round
//               plus the vector's buffer, 32 x its capacity at the end.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

static std::map<std::string, std::string> *index_;
static std::vector<std::string> *names_;

__attribute__((noinline)) void leak_index(int round)
{
    for (int j = 0; j < 50; j++) {
        std::string key(20, 'k');
        std::snprintf(&key[0], 20, "%08d", round * 50 + j);
        key[8] = 'k';
        key.append(50, 'x');
        index_->emplace(std::move(key), std::string(300, 'v'));
    }
}

__attribute__((noinline)) void leak_names(int round)
{
    (void)round;
    for (int j = 0; j < 50; j++) names_->push_back(std::string(1000, 'n'));
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? std::atoi(argv[1]) : 20, ms = argc > 2 ? std::atoi(argv[2]) : 50;
    index_ = new std::map<std::string, std::string>;
    names_ = new std::vector<std::string>;
    for (int r = 0; r < rounds; r++) {
        leak_index(r);
        leak_names(r);
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
    std::printf("wl_map: %d rounds, %zu entries, vector capacity %zu\n", rounds, index_->size(),
                names_->capacity());
    return 0;
}
