/** A writable that keeps what is written (a CLI's stdout or stderr, in process). */
export function textSink(): { text: string; write(s: string): boolean } {
  return {
    text: '',
    write(s: string) {
      this.text += s;
      return true;
    },
  };
}
