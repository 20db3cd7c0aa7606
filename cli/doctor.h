/*
 * doctor.h - `sandq doctor` (doctor.c): its entry point, which the
 * dispatcher (cli.c) calls.
 */
#ifndef SANDQ_CLI_DOCTOR_H
#define SANDQ_CLI_DOCTOR_H

/* Runs "sandq doctor" with the arguments after the verb; returns the exit status. */
int doctor_main(int argc, char **argv);

#endif
