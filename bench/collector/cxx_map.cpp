// A std::map<std::string, std::string> and std::string program for the
// collector's real-program benchmark (real.py): ROUNDS rounds (argv[1],
// default 6) of building a map of N entries (argv[2], default 60000) from
// formatted keys and values (strings past the small-string buffer, so each
// is an allocation), looking every key up through a temporary string,
// rewriting a third of the values by concatenation, erasing half the
// entries, then clearing the map. Every allocation goes through operator
// new from libstdc++'s out-of-line string and tree code, as in real C++
// programs. Prints a checksum.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? std::atoi(argv[1]) : 6;
    int n = argc > 2 ? std::atoi(argv[2]) : 60000;
    unsigned long sum = 0;
    for (int r = 0; r < rounds; r++) {
        std::map<std::string, std::string> m;
        char buf[64];
        for (int i = 0; i < n; i++) {
            std::snprintf(buf, sizeof buf, "key-%08d-round-%04d-padding", (i * 7919) % n, r);
            std::string v = std::string("value of ") + buf + " with some more text";
            m.emplace(buf, std::move(v));
        }
        for (int i = 0; i < n; i++) {
            std::snprintf(buf, sizeof buf, "key-%08d-round-%04d-padding", i, r);
            auto it = m.find(std::string(buf));
            if (it != m.end()) sum += it->second.size();
        }
        int k = 0;
        for (auto &kv : m)
            if (k++ % 3 == 0) kv.second = kv.second + " and a suffix that moves it";
        for (auto it = m.begin(); it != m.end();) it = (k++ % 2) ? m.erase(it) : std::next(it);
        sum += m.size();
    }
    std::printf("cxx_map: %lu\n", sum);
    return 0;
}
