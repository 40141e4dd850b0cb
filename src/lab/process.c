/* What `thermocline lab` does to the operating system: the signals that stop it,
 * the child processes it starts (this executable again, through /proc/self/exe)
 * and stops, loopback ports, and the data directories it copies and removes. */
#include "lab/lab_private.h"
#include "common/clock.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A signal handler can only reach file-scope state; nothing else is global. */
static volatile sig_atomic_t signal_count;
static volatile sig_atomic_t last_signal;

static void on_stop_signal(int signal_number)
{
    last_signal = signal_number;
    signal_count = signal_count + 1;
}

void lab_signals_install(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0; /* no SA_RESTART: a sleep or a blocking wait returns early */
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGHUP, &action, NULL);
    signal(SIGPIPE, SIG_IGN);
}

bool lab_interrupted(void)
{
    return signal_count > 0;
}

int lab_interrupt_signal(void)
{
    return last_signal;
}

bool lab_sleep_ms(int64_t milliseconds)
{
    int64_t deadline = clock_monotonic_ms() + milliseconds;
    while (!lab_interrupted()) {
        int64_t left = deadline - clock_monotonic_ms();
        if (left <= 0) {
            return true;
        }
        if (left > 100) {
            left = 100;
        }
        struct timespec pause = {.tv_sec = 0, .tv_nsec = (long)left * 1000000L};
        nanosleep(&pause, NULL);
    }
    return false;
}

/* --- children ----------------------------------------------------------------------- */

static void write_command_line(int fd, char *const argv[])
{
    char line[4096];
    size_t used = (size_t)snprintf(line, sizeof line, "$");
    for (int i = 0; argv[i] != NULL && used < sizeof line; i++) {
        used += (size_t)snprintf(line + used, sizeof line - used, " %s", argv[i]);
    }
    if (used >= sizeof line - 1) {
        used = sizeof line - 2;
    }
    line[used++] = '\n';
    ssize_t written = write(fd, line, used);
    (void)written; /* the log line is a courtesy; the run does not depend on it */
}

bool lab_process_start(lab_process_t *process, const char *name, char *const argv[], const char *log_path,
                       bool stderr_to_terminal, bson_error_t *error)
{
    memset(process, 0, sizeof *process);
    snprintf(process->name, sizeof process->name, "%s", name);
    snprintf(process->log_path, sizeof process->log_path, "%s", log_path);
    int log_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot write the log %s: %s", log_path, strerror(errno));
    }
    /* Under --log-format json the children log json too, and their logs hold
     * nothing else (no command line first). */
    bool json = tc_log_get_format() == TC_LOG_FORMAT_JSON;
    size_t argument_count = 0;
    while (argv[argument_count] != NULL) {
        argument_count++;
    }
    char **child_argv = bson_malloc0((argument_count + 3) * sizeof *child_argv);
    for (size_t i = 0, out = 0; i < argument_count; i++) {
        child_argv[out++] = argv[i];
        if (i == 0 && json) {
            child_argv[out++] = "--log-format";
            child_argv[out++] = "json";
        }
    }
    if (!json) {
        write_command_line(log_fd, argv);
    }
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int saved = errno;
        bson_free(child_argv);
        close(log_fd);
        if (null_fd >= 0) {
            close(null_fd);
        }
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot start %s: fork: %s", name, strerror(saved));
    }
    if (pid == 0) {
        /* The child: only async-signal-safe calls until exec. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) {
            _exit(127); /* the lab died between fork and prctl */
        }
        struct sigaction default_action;
        memset(&default_action, 0, sizeof default_action);
        default_action.sa_handler = SIG_DFL;
        sigaction(SIGINT, &default_action, NULL);
        sigaction(SIGTERM, &default_action, NULL);
        sigaction(SIGHUP, &default_action, NULL);
        sigaction(SIGPIPE, &default_action, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (null_fd >= 0) {
            dup2(null_fd, STDIN_FILENO);
        }
        dup2(log_fd, STDOUT_FILENO);
        if (!stderr_to_terminal) {
            dup2(log_fd, STDERR_FILENO);
        }
        execv("/proc/self/exe", child_argv);
        _exit(127);
    }
    bson_free(child_argv);
    close(log_fd);
    if (null_fd >= 0) {
        close(null_fd);
    }
    process->pid = pid;
    return true;
}

static void record_exit(lab_process_t *process, int status)
{
    process->wait_status = status;
    process->exited = true;
    process->pid = 0;
}

bool lab_process_running(lab_process_t *process)
{
    if (process->pid <= 0) {
        return false;
    }
    int status;
    pid_t reaped = waitpid(process->pid, &status, WNOHANG);
    if (reaped == process->pid) {
        record_exit(process, status);
        return false;
    }
    if (reaped < 0 && errno == ECHILD) {
        record_exit(process, 0);
        return false;
    }
    return true;
}

void lab_process_stop(lab_process_t *process, int64_t timeout_ms)
{
    if (!lab_process_running(process)) {
        return;
    }
    pid_t pid = process->pid;
    int signals_before = signal_count;
    kill(pid, SIGTERM);
    int64_t deadline = clock_monotonic_ms() + timeout_ms;
    while (lab_process_running(process)) {
        /* A second Ctrl-C means "now": no more waiting for a clean shutdown. */
        if (clock_monotonic_ms() >= deadline || signal_count > signals_before) {
            kill(pid, SIGKILL);
            int status;
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            record_exit(process, status);
            return;
        }
        struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000000L};
        nanosleep(&pause, NULL);
    }
}

bool lab_process_succeeded(const lab_process_t *process)
{
    return process->exited && WIFEXITED(process->wait_status) && WEXITSTATUS(process->wait_status) == 0;
}

double lab_process_cpu_seconds(const lab_process_t *process)
{
    if (process->pid <= 0) {
        return -1.0;
    }
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)process->pid);
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        return -1.0;
    }
    size_t length = fread(text, 1, sizeof text - 1, file);
    fclose(file);
    text[length] = '\0';
    /* The command name, field 2, is in parentheses and may hold spaces: count
     * from the last ')'. utime and stime are fields 14 and 15, in clock ticks. */
    const char *after_name = strrchr(text, ')');
    unsigned long user_ticks, system_ticks;
    if (after_name == NULL ||
        sscanf(after_name + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &user_ticks, &system_ticks) !=
            2) {
        return -1.0;
    }
    return (double)(user_ticks + system_ticks) / (double)sysconf(_SC_CLK_TCK);
}

void lab_process_describe_exit(const lab_process_t *process, char *out, size_t size)
{
    if (!process->exited) {
        snprintf(out, size, "is still running");
    } else if (WIFEXITED(process->wait_status)) {
        snprintf(out, size, "exited with status %d", WEXITSTATUS(process->wait_status));
    } else if (WIFSIGNALED(process->wait_status)) {
        snprintf(out, size, "was killed by signal %d (%s)", WTERMSIG(process->wait_status),
                 strsignal(WTERMSIG(process->wait_status)));
    } else {
        snprintf(out, size, "ended (wait status %d)", process->wait_status);
    }
}

/* --- ports -------------------------------------------------------------------------- */

/* Binds a loopback socket to a port the kernel picks; -1 on failure. */
static int bind_free_port(int *out_port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = 0};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) != 0 ||
        getsockname(fd, (struct sockaddr *)&address, &length) != 0) {
        close(fd);
        return -1;
    }
    *out_port = ntohs(address.sin_port);
    return fd;
}

int lab_free_port(void)
{
    int port = 0;
    int fd = bind_free_port(&port);
    if (fd < 0) {
        return 0;
    }
    close(fd);
    return port;
}

bool lab_free_ports(int *ports, size_t count)
{
    int descriptors[2 + LAB_MAX_PROXIES]; /* a run's archive, fast tier and proxies */
    size_t bound = 0;
    bool ok = count <= sizeof descriptors / sizeof descriptors[0];
    for (; ok && bound < count; bound++) {
        descriptors[bound] = bind_free_port(&ports[bound]);
        ok = descriptors[bound] >= 0;
    }
    for (size_t i = 0; i < bound; i++) {
        if (descriptors[i] >= 0) {
            close(descriptors[i]);
        }
    }
    for (size_t i = 0; !ok && i < count; i++) {
        ports[i] = 0;
    }
    return ok;
}

bool lab_port_open(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return false;
    }
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool open = connect(fd, (struct sockaddr *)&address, sizeof address) == 0;
    close(fd);
    return open;
}

/* --- files -------------------------------------------------------------------------- */

bool lab_make_directory(const char *path, bson_error_t *error)
{
    char partial[PATH_MAX];
    size_t length = strlen(path);
    if (length == 0 || length >= sizeof partial) {
        return tc_error_set(error, TC_ERR_BAD_VALUE, "'%s' is not a usable directory name", path);
    }
    memcpy(partial, path, length + 1);
    for (size_t i = 1; i <= length; i++) {
        if (partial[i] == '/' || partial[i] == '\0') {
            char saved = partial[i];
            partial[i] = '\0';
            if (mkdir(partial, 0755) != 0 && errno != EEXIST) {
                return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot create the directory %s: %s", partial,
                                    strerror(errno));
            }
            partial[i] = saved;
        }
    }
    struct stat info;
    if (stat(path, &info) != 0 || !S_ISDIR(info.st_mode)) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "%s exists and is not a directory", path);
    }
    return true;
}

static bool copy_file(const char *from, const char *to, bson_error_t *error)
{
    bool ok = false;
    int in = open(from, O_RDONLY | O_CLOEXEC);
    int out = -1;
    if (in < 0) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot read %s: %s", from, strerror(errno));
        goto done;
    }
    out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot write %s: %s", to, strerror(errno));
        goto done;
    }
    /* copy_file_range keeps the bytes in the kernel; read/write where it cannot. */
    for (;;) {
        ssize_t copied = copy_file_range(in, NULL, out, NULL, 1 << 30, 0);
        if (copied == 0) {
            break;
        }
        if (copied > 0) {
            continue;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP) {
            tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot copy %s: %s", from, strerror(errno));
            goto done;
        }
        char buffer[1 << 16];
        ssize_t got;
        while ((got = read(in, buffer, sizeof buffer)) != 0) {
            if (got < 0 && errno == EINTR) {
                continue;
            }
            if (got < 0 || write(out, buffer, (size_t)got) != got) {
                tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot copy %s: %s", from, strerror(errno));
                goto done;
            }
        }
        break;
    }
    ok = true;
done:
    if (in >= 0) {
        close(in);
    }
    if (out >= 0 && close(out) != 0 && ok) {
        ok = tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot write %s: %s", to, strerror(errno));
    }
    return ok;
}

bool lab_copy_tree(const char *from, const char *to, bson_error_t *error)
{
    if (!lab_make_directory(to, error)) {
        return false;
    }
    DIR *directory = opendir(from);
    if (directory == NULL) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot read the directory %s: %s", from, strerror(errno));
    }
    bool ok = true;
    struct dirent *entry;
    while (ok && (entry = readdir(directory)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) {
            continue;
        }
        char source[PATH_MAX], target[PATH_MAX];
        if ((size_t)snprintf(source, sizeof source, "%s/%s", from, entry->d_name) >= sizeof source ||
            (size_t)snprintf(target, sizeof target, "%s/%s", to, entry->d_name) >= sizeof target) {
            ok = tc_error_set(error, TC_ERR_OPERATION_FAILED, "path too long under %s", from);
            break;
        }
        struct stat info;
        if (lstat(source, &info) != 0) {
            ok = tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot read %s: %s", source, strerror(errno));
        } else if (S_ISDIR(info.st_mode)) {
            ok = lab_copy_tree(source, target, error);
        } else if (S_ISREG(info.st_mode)) {
            ok = copy_file(source, target, error);
        }
    }
    closedir(directory);
    return ok;
}

bool lab_flush_file_system(const char *path, bson_error_t *error)
{
    int descriptor = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    bool ok = descriptor >= 0 && syncfs(descriptor) == 0;
    if (!ok) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot write %s to disk: %s", path, strerror(errno));
    }
    if (descriptor >= 0) {
        close(descriptor);
    }
    return ok;
}

int64_t lab_free_disk_bytes(const char *path)
{
    struct statvfs info;
    return statvfs(path, &info) == 0 ? (int64_t)info.f_bavail * (int64_t)info.f_frsize : -1;
}

static int remove_entry(const char *path, const struct stat *info, int type, struct FTW *walk)
{
    (void)info, (void)type, (void)walk;
    remove(path);
    return 0;
}

void lab_remove_tree(const char *path)
{
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

bool lab_write_file(const char *path, const char *text, bson_error_t *error)
{
    FILE *file = fopen(path, "w");
    if (file == NULL) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot write %s: %s", path, strerror(errno));
    }
    fputs(text, file);
    bool ok = !ferror(file);
    if (fclose(file) != 0) {
        ok = false;
    }
    if (!ok) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot write %s: %s", path, strerror(errno));
    }
    return true;
}

char *lab_read_file(const char *path, size_t *out_length, bson_error_t *error)
{
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot read %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t capacity = 1 << 16, length = 0;
    char *text = bson_malloc(capacity + 1);
    size_t got;
    while ((got = fread(text + length, 1, capacity - length, file)) > 0) {
        length += got;
        if (length == capacity) {
            capacity *= 2;
            text = bson_realloc(text, capacity + 1);
        }
    }
    bool failed = ferror(file);
    fclose(file);
    if (failed) {
        bson_free(text);
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot read %s", path);
        return NULL;
    }
    text[length] = '\0';
    *out_length = length;
    return text;
}
