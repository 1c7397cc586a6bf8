// splitoracle prints how llama.cpp's pre-tokenizer splits texts into words:
// it calls unicode_regex_split from llama.cpp's own src/unicode.cpp with
// the regexes given as arguments. Input: texts separated by NUL bytes on
// stdin. Output: one line per text, the byte length of every word. Built
// and run by vocab-derived.mjs (see there); not part of rill.
//
//   g++ -O1 -std=c++17 -I$LLAMA_SRC/src scripts/peer/splitoracle.cpp \
//       $LLAMA_SRC/src/unicode.cpp $LLAMA_SRC/src/unicode-data.cpp -o splitoracle
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "unicode.h"

int main(int argc, char ** argv) {
    std::vector<std::string> regexes(argv + 1, argv + argc);
    std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    size_t start = 0;
    while (start <= in.size()) {
        size_t end = in.find('\0', start);
        if (end == std::string::npos) {
            end = in.size();
        }
        const std::string text = in.substr(start, end - start);
        const char * sep = "";
        for (const auto & word : unicode_regex_split(text, regexes, false)) {
            std::cout << sep << word.size();
            sep = " ";
        }
        std::cout << "\n";
        start = end + 1;
    }
    return 0;
}
