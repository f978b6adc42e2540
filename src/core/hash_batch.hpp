// The definitions live in the public header engram/hash_batch.hpp; this name stays for the code inside src/.
#pragma once

#include "engram/hash_batch.hpp"
