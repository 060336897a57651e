// Smoke test: the test binary links.
#include <catch2/catch.hpp>
TEST_CASE("smoke") { REQUIRE(1 + 1 == 2); }
