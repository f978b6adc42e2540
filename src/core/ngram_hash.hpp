// The definitions live in the public header engram/ngram_hash.hpp; this name stays for the code inside src/.
#pragma once

#include "engram/ngram_hash.hpp"
