# Compile flags shared by every ced-serve target.
add_library(ced_flags INTERFACE)
target_compile_options(ced_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-sign-compare>)
if(CED_NATIVE)
  target_compile_options(ced_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
if(CED_SANITIZE)
  target_compile_options(ced_flags INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${CED_SANITIZE} -fno-omit-frame-pointer>)
  target_link_options(ced_flags INTERFACE -fsanitize=${CED_SANITIZE})
endif()
target_include_directories(ced_flags INTERFACE ${PROJECT_SOURCE_DIR})
