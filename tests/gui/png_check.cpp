// Checks a GUI screenshot: the PNG loads, has the expected size, and is not
// blank (enough distinct colours, and enough pixels unlike the most common one).
// usage: shardlab_png_check FILE WIDTH HEIGHT
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s FILE WIDTH HEIGHT\n", argv[0]);
    return 2;
  }
  int w = 0, h = 0, channels = 0;
  unsigned char* px = stbi_load(argv[1], &w, &h, &channels, 3);
  if (!px) {
    std::fprintf(stderr, "FAIL: cannot load %s: %s\n", argv[1], stbi_failure_reason());
    return 1;
  }
  const int want_w = std::atoi(argv[2]), want_h = std::atoi(argv[3]);
  int rc = 0;
  if (w != want_w || h != want_h) {
    std::fprintf(stderr, "FAIL: %s is %dx%d, expected %dx%d\n", argv[1], w, h, want_w, want_h);
    rc = 1;
  }
  // Blank = (almost) one colour. A real frame has text, spans and bars.
  std::map<unsigned, long> colours;
  const long n = static_cast<long>(w) * h;
  for (long i = 0; i < n; ++i) {
    const unsigned char* p = px + 3 * i;
    ++colours[static_cast<unsigned>(p[0] << 16 | p[1] << 8 | p[2])];
  }
  long background = 0;  // the most common colour's count
  for (const auto& [c, count] : colours) background = std::max(background, count);
  const double share = static_cast<double>(n - background) / static_cast<double>(n);
  if (colours.size() < 32 || share < 0.02) {
    std::fprintf(stderr,
                 "FAIL: %s looks blank (%zu colours, %.1f%% of pixels unlike the background)\n",
                 argv[1], colours.size(), 100 * share);
    rc = 1;
  }
  if (rc == 0)
    std::printf("ok: %s %dx%d, %zu colours, %.1f%% of pixels unlike the background\n", argv[1], w,
                h, colours.size(), 100 * share);
  stbi_image_free(px);
  return rc;
}
