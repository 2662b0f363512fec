// The doctest runner shared by every test executable; returns non-zero on any failure.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
