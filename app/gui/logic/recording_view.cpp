// Status text for an opened recording (see recording_view.h).
#include "app/gui/logic/recording_view.h"

#include <cctype>

namespace shardlab::gui {

std::string readable_date(const std::string& s) {
  // Exactly what describe_origin() writes: YYYY-MM-DDTHH:MM:SSZ.
  const char* shape = "dddd-dd-ddTdd:dd:ddZ";
  if (s.size() != 20) return s;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool digit = std::isdigit(static_cast<unsigned char>(s[i])) != 0;
    if (shape[i] == 'd' ? !digit : s[i] != shape[i]) return s;
  }
  return s.substr(0, 10) + " " + s.substr(11, 5) + " UTC";
}

std::string recording_status(const std::string& file, const RecordingOrigin& origin, int world) {
  return "recording: " + file + " \xE2\x80\x94 recorded on " + origin.device + ", world " +
         std::to_string(world) + ", " + readable_date(origin.date);
}

}  // namespace shardlab::gui
