/* A shared object named like a plugin that exports no entry point. */
__attribute__((visibility("default"))) int not_a_tensorframe_plugin(void) { return 42; }
